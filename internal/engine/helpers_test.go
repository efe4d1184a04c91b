package engine

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

func rule(name string) policy.Rule {
	return policy.Rule{Name: name, Proto: "udp", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
}

// The fakes are what the engine asks of a kernel and of its capabilities.
var (
	_ Kernel          = (*fakehost.FakeKernel)(nil)
	_ QSockKernel     = (*fakehost.FakeQSockKernel)(nil)
	_ ShieldKernel    = (*fakehost.FakeShieldKernel)(nil)
	_ ContainerKernel = (*fakehost.FakeContainerKernel)(nil)
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// monoNow is CLOCK_MONOTONIC, the clock of the datapath's flow times.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// testEnv is an engine over a state directory and a fake kernel.
type testEnv struct {
	dir string
	k   *fakehost.FakeKernel
	cfg Config
}

// newEnv writes config (TOML, "" for none) into a fresh directory and
// makes a fake kernel with interface eth0 (ifindex 2).
func newEnv(t testing.TB, config string) *testEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		ConfigPath: filepath.Join(dir, "hostqos.toml"), StatePath: filepath.Join(dir, "state", "state.json"),
		RuntimePath: filepath.Join(dir, "run", "runtime.json"), CgroupBase: "/hostqos/ns-1", Logger: quiet,
	}
	if config != "" {
		if err := os.WriteFile(cfg.ConfigPath, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	k := fakehost.NewFakeKernel(root)
	k.Ifindexes["eth0"] = 2
	return &testEnv{dir: dir, k: k, cfg: cfg}
}

// start makes an engine over the env's state and starts it on the fake
// kernel.
func (env *testEnv) start(t testing.TB) *Engine {
	t.Helper()
	e, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fake's links are not this host's interfaces.
	e.obs.SetNetDev(func() map[string]history.Counters { return map[string]history.Counters{} })
	if err := e.Start(Host{Kernel: env.k}); err != nil {
		t.Fatal(err)
	}
	return e
}

var (
	root   = Caller{PID: 1, UID: 0, Privileged: true}
	admin  = Caller{PID: 2, UID: 1000, GID: 999, Privileged: true} // group hostqos
	nobody = Caller{PID: 3, UID: 65534, GID: 65534}
	alice  = Caller{PID: 4, UID: 1001, GID: 1001}
)

// deriveForTest derives m (no links, no shield) with a fresh slot table and
// app selectors resolved under cgRoot.
func deriveForTest(m store.Merged, cgRoot string) (*derive.Desired, *store.Slots, error) {
	res := derive.NewSystemResolver(cgRoot)
	defer res.Close()
	in := derive.Input{Policy: m.Policy, Runs: m.Runs, Resolver: res}
	x := derive.Expand(in)
	slots := store.NewSlots()
	if err := slots.Assign(x.Policy, x.ResvKeys, nil); err != nil {
		return nil, nil, err
	}
	in.Slots = slots.View()
	d, err := derive.Compile(in, x)
	return d, slots, err
}

// testKey is a well-formed idempotency key.
const testKey = "0123456789abcdef0123456789abcdef"
