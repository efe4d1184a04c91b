package rsvpfront

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
)

// testEnv is an engine over a state directory and a fake kernel.
type testEnv struct {
	dir string
	k   *fakehost.FakeKernel
	cfg engine.Config
}

// newEnv writes config (TOML, "" for none) into a fresh directory and
// makes a fake kernel with interface eth0 (ifindex 2).
func newEnv(t testing.TB, config string) *testEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := engine.Config{
		ConfigPath: filepath.Join(dir, "hostqos.toml"), StatePath: filepath.Join(dir, "state", "state.json"),
		RuntimePath: filepath.Join(dir, "run", "runtime.json"), CgroupBase: "/hostqos/ns-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
func (env *testEnv) start(t testing.TB) *engine.Engine {
	t.Helper()
	e, err := engine.New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(engine.Host{Kernel: env.k}); err != nil {
		t.Fatal(err)
	}
	return e
}

var (
	root   = engine.Caller{PID: 1, UID: 0, Privileged: true}
	nobody = engine.Caller{PID: 3, UID: 65534, GID: 65534}
)

// resvConfig is one link with 8mbit reservable.
const resvConfig = `
[[link]]
name = "eth0"
egress_rate = "10mbit"
`
