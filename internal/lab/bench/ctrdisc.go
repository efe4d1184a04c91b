package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/containers"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
)

// podmanFlags are what a Podman container needs on these machines (as
// containertest.PodmanFlags, which is for tests: runc, since crun refuses
// hybrid cgroup layouts; cgroupfs, no systemd; rlimits the sandbox can
// set).
var podmanFlags = []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"}

// containerImage imports the test image (busybox-static and the static
// binaries given) into rt (podman or docker) with the source tree's
// scripts/container-image.sh, offline, and returns its tag.
func containerImage(rt string, binaries ...string) (string, error) {
	script, err := sourceFile("scripts/container-image.sh")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(script, append([]string{rt}, binaries...)...).Output()
	if err != nil {
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			return "", fmt.Errorf("build the container image: %w: %s", err, strings.TrimSpace(string(xe.Stderr)))
		}
		return "", fmt.Errorf("build the container image: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// sourceFile finds rel in the source tree, from the working directory up
// (the benchmarks that need the tree run from it).
func sourceFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find %s: not in the working directory or above; run the benchmark from the hostqos source tree", rel)
		}
		dir = parent
	}
}

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// firstArrivals reads a UDP socket and records when its first packet and
// its first packet with DSCP want arrived.
type firstArrivals struct {
	hole        *udpHole
	mu          sync.Mutex
	first, mark time.Time
	done        chan struct{}
}

func listenFirst(node *testbed.Node, addr string, want int) (*firstArrivals, error) {
	hole, err := bindUDP(node, addr, false)
	if err != nil {
		return nil, err
	}
	if err := setRecvTOS(hole.c); err != nil {
		hole.Close()
		return nil, err
	}
	f := &firstArrivals{hole: hole, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		buf := make([]byte, 2048)
		oob := make([]byte, 128)
		for {
			_, oobn, _, _, err := hole.c.ReadMsgUDP(buf, oob)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			now := time.Now()
			tos := -1
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1 {
						tos = int(m.Data[0])
					}
				}
			}
			f.mu.Lock()
			if f.first.IsZero() {
				f.first = now
			}
			if f.mark.IsZero() && tos>>2 == want {
				f.mark = now
			}
			f.mu.Unlock()
		}
	}()
	return f, nil
}

func (f *firstArrivals) times() (first, mark time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first, f.mark
}

func (f *firstArrivals) Close() {
	f.hole.c.Close()
	<-f.done
}

// watcherTimes runs a containers.Watcher in node (as the daemon does) and
// records when each container name first appeared with a veth.
type watcherTimes struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	cancel context.CancelFunc
	done   chan error
}

func watchIn(node *testbed.Node, cfg containers.Config) (*watcherTimes, error) {
	ctx, cancel := context.WithCancel(context.Background())
	wt := &watcherTimes{seen: map[string]time.Time{}, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan *containers.Watcher, 1)
	go func() {
		wt.done <- node.Do(func() error {
			w, err := containers.NewWatcher(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				ready <- nil
				return err
			}
			ready <- w
			return w.Run(ctx)
		})
	}()
	w := <-ready
	if w == nil {
		cancel()
		return nil, fmt.Errorf("start a container watcher: %w", <-wt.done)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.Changed():
			}
			now := time.Now()
			_, list := w.Snapshot()
			wt.mu.Lock()
			for _, c := range list {
				if _, ok := wt.seen[c.Name]; !ok && len(c.Veths) > 0 {
					wt.seen[c.Name] = now
				}
			}
			wt.mu.Unlock()
		}
	}()
	return wt, nil
}

func (wt *watcherTimes) at(name string) time.Time {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	return wt.seen[name]
}

func (wt *watcherTimes) stop() error {
	wt.cancel()
	return <-wt.done
}

// ctrDiscovery: from `podman run` of a container (its own network
// namespace, which has a veth to the host's) to the first of its packets
// marked by its rule, added before the container existed; and to the
// watcher's Changed naming it.
func ctrDiscovery(e *env, r *Report) error {
	rounds := e.n(6, 2)
	const pps = 1000
	if _, err := exec.LookPath("podman"); err != nil {
		return errors.New("podman is not installed (scripts/install-deps.sh installs it)")
	}
	image, err := containerImage("podman", filepath.Join(e.binDir, "hostqos"))
	if err != nil {
		return err
	}
	p, err := e.ctrPath("benchctrdisc")
	if err != nil {
		return err
	}
	defer p.tb.Close()
	// preload: the classifiers verified at start, as a daemon in the
	// host's network namespace with a runtime installed does by itself
	// (this one runs in a namespace of the bench's).
	d, err := e.daemon(p.host, fmt.Sprintf("[containers]\npreload = true\n\n[[link]]\nname = %q\n", p.uplink))
	if err != nil {
		return err
	}
	defer d.Stop()
	// A host's daemon starts well before its containers: let the
	// preload finish, as it would have.
	for end := time.Now().Add(30 * time.Second); !strings.Contains(d.Log(), "loaded the classifiers of containers' veths"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("the daemon did not preload the container classifiers within 30 s:\n%s", d.Log())
		}
	}
	wt, err := watchIn(p.host, containers.Config{})
	if err != nil {
		return err
	}
	defer wt.stop()
	r.setup("discovery: a Podman container (%s, --network ns:<namespace ctr>, image %s imported offline) whose process sends %d-byte UDP at %d pkt/s to rx from its start (`hostqos tool udp-send`); the rule `hostqos rule add --container <its name> --dscp EF` is added before `podman run`; rx records when the first packet and the first EF packet arrive; %d rounds, a new container each; the first container since the daemon started apart; [containers] preload = true (the veth classifiers verified at start, as a daemon in the host's network namespace with a runtime installed does by itself)", strings.Join(podmanFlags, " "), image, 64, pps, rounds)
	r.setup("discovery: a socket the container makes before hostqos knows its namespace has no identity: its packets are classified at its veth with the veth's identity once the daemon's watcher has found it and the engine has attached the classifiers; until then they are the host's (forwarded, unmarked, counted). With --network ns: the namespace and its veth exist before the container's process, so a container found before its process opens its socket is marked from its first packet")
	r.setup("discovery: the watcher's own latency: a containers.Watcher in the host's namespace (as the daemon runs it), the time of the Changed that first lists the container with its veth")
	var startup, toMark, fromFirst, watcher []float64
	for i := 0; i < rounds; i++ {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		name := randName("hqbench-disc-")
		port := 5300 + i
		if _, err := d.CLI("rule", "add", "disc", "--container", name, "--dscp", "EF"); err != nil {
			return err
		}
		f, err := listenFirst(p.rx, fmt.Sprintf("%s:%d", ctrRxAddr, port), 46)
		if err != nil {
			return err
		}
		args := append([]string{"run", "-d", "--name", name}, podmanFlags...)
		args = append(args, "--network", "ns:/run/netns/"+p.ctr.NetnsName, image,
			"hostqos", "tool", "udp-send", "--to", fmt.Sprintf("%s:%d", ctrRxAddr, port), "--pps", fmt.Sprint(pps), "--size", "64", "--duration", "60s")
		t0 := time.Now()
		out, err := exec.Command("podman", args...).CombinedOutput()
		if err != nil {
			f.Close()
			_ = exec.Command("podman", "rm", "-f", "-t", "0", name).Run()
			return fmt.Errorf("podman run: %w: %s", err, strings.TrimSpace(string(out)))
		}
		deadline := time.Now().Add(10 * time.Second)
		var first, marked, seen time.Time
		for time.Now().Before(deadline) {
			first, marked = f.times()
			seen = wt.at(name)
			if !marked.IsZero() && !seen.IsZero() {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		f.Close()
		var diag string
		if marked.IsZero() {
			cs, _ := d.CLI("container", "list")
			rl, _ := d.CLI("rule", "list")
			st, _ := d.CLI("stat", "apps")
			diag = fmt.Sprintf("\ncontainer list:\n%s\nrule list:\n%s\nstat apps:\n%s\nlog:\n%s", cs, rl, st, d.Log())
		}
		rmOut, rmErr := exec.Command("podman", "rm", "-f", "-t", "0", name).CombinedOutput()
		if _, err := d.CLI("rule", "remove", "disc"); err != nil {
			return err
		}
		if rmErr != nil {
			return fmt.Errorf("podman rm %s: %w: %s", name, rmErr, strings.TrimSpace(string(rmOut)))
		}
		if first.IsZero() || marked.IsZero() || seen.IsZero() {
			return fmt.Errorf("round %d: within 10 s of podman run: first packet at %v, first EF at %v, watcher saw it at %v%s",
				i+1, since(t0, first), since(t0, marked), since(t0, seen), diag)
		}
		startup = append(startup, ms(first.Sub(t0)))
		toMark = append(toMark, ms(marked.Sub(t0)))
		fromFirst = append(fromFirst, ms(marked.Sub(first)))
		watcher = append(watcher, ms(seen.Sub(t0)))
	}
	r.row(append(append([]string{"discovery: podman run → the container's first packet at rx (ms; the runtime's start-up)"}, spread(startup, f0)...), "—", "—")...)
	r.row(append(append([]string{"discovery: podman run → the watcher lists it with its veth (ms)"}, spread(watcher, f0)...),
		fmt.Sprintf("%+.0f ms vs its first packet", median(watcher)-median(startup)), "—")...)
	unmarked := func(v float64) string { return fmt.Sprintf("%.0f packets unmarked at %d pkt/s", v*pps/1000, pps) }
	r.row(append(append([]string{"discovery, the first container since the daemon started: its first packet → its first EF packet (ms; classifiers preloaded)"}, spread(fromFirst[:1], f0)...),
		unmarked(fromFirst[0]), "≤ 200 ms "+mark(fromFirst[0] <= 200))...)
	later, laterRun := fromFirst[1:], toMark[1:]
	r.row(append(append([]string{"discovery, later containers: podman run → its first EF packet at rx (ms)"}, spread(laterRun, f0)...), "—", "—")...)
	r.row(append(append([]string{"discovery, later containers: its first packet → its first EF packet (ms; its rule in force)"}, spread(later, f0)...),
		unmarked(median(later)), "≤ 200 ms "+mark(median(later) <= 200))...)
	r.metric("disc_ms_median_startup", median(startup))
	r.metric("disc_ms_median_watcher", median(watcher))
	r.metric("disc_ms_first_container_first_to_mark", fromFirst[0])
	r.metric("disc_ms_median_run_to_mark", median(laterRun))
	r.metric("disc_ms_median_first_to_mark", median(later))
	return ctrDiscoveryDocker(e, r, p, d, wt)
}

// ctrDiscoveryDocker: a Docker container started with --network none
// whose process waits for a default route, then sends; the bench gives
// it a veth into the host's namespace (as a CNI plugin would), its
// address and route. From the veth's creation (when the container
// becomes the daemon's) to its first packet, to its first EF packet, and
// to the watcher listing it.
func ctrDiscoveryDocker(e *env, r *Report, p *ctrPath, d *lab.Daemon, wt *watcherTimes) error {
	rounds := e.n(3, 1)
	const pps = 1000
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("docker is not installed (scripts/install-deps.sh installs it)")
	}
	script, err := sourceFile("scripts/dockerd.sh")
	if err != nil {
		return err
	}
	if out, err := exec.Command(script).CombinedOutput(); err != nil {
		return fmt.Errorf("start Docker: %w: %s", err, strings.TrimSpace(string(out)))
	}
	image, err := containerImage("docker", filepath.Join(e.binDir, "hostqos"))
	if err != nil {
		return err
	}
	if err := run(p.rx, "ip", "route", "replace", "198.18.3.0/24", "via", "198.18.2.1"); err != nil {
		return err
	}
	r.setup("discovery, Docker: a container (%s --network none, the same image) whose process waits for a default route, then sends UDP at %d pkt/s to rx; the bench gives it a veth into the host's namespace (198.18.3.1/24 inside, 198.18.3.2/24 on the host side) and the route, as a CNI plugin would; times from the veth's creation (the container becomes the daemon's then), after the Podman rounds (the veth classifiers loaded); %d round(s)", strings.Join(dockerFlags, " "), pps, rounds)
	var startup, toMark, fromFirst, watcher []float64
	for i := 0; i < rounds; i++ {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		res, err := dockerRound(p, d, wt, image, i, pps)
		if err != nil {
			return fmt.Errorf("round %d with Docker: %w", i+1, err)
		}
		startup = append(startup, res[0])
		toMark = append(toMark, res[1])
		fromFirst = append(fromFirst, res[2])
		watcher = append(watcher, res[3])
	}
	r.row(append(append([]string{"discovery, Docker: veth made → the container's first packet at rx (ms)"}, spread(startup, f0)...), "—", "—")...)
	r.row(append(append([]string{"discovery, Docker: veth made → the watcher lists it with its veth (ms)"}, spread(watcher, f0)...),
		fmt.Sprintf("%+.0f ms vs its first packet", median(watcher)-median(startup)), "—")...)
	r.row(append(append([]string{"discovery, Docker: veth made → its first EF packet at rx (ms)"}, spread(toMark, f0)...), "—", "—")...)
	r.row(append(append([]string{"discovery, Docker: its first packet → its first EF packet (ms; its rule in force)"}, spread(fromFirst, f0)...),
		fmt.Sprintf("%.0f packets unmarked at %d pkt/s", median(fromFirst)*pps/1000, pps), "≤ 200 ms "+mark(median(fromFirst) <= 200))...)
	r.metric("disc_ms_median_docker_first_to_mark", median(fromFirst))
	return nil
}

// dockerFlags are what a Docker container needs on these machines (as
// containertest.DockerFlags).
var dockerFlags = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"}

// dockerRound runs one Docker container and returns, in ms: veth made →
// first packet, → first EF packet, first packet → first EF packet, veth
// made → the watcher listing it.
func dockerRound(p *ctrPath, d *lab.Daemon, wt *watcherTimes, image string, i, pps int) ([4]float64, error) {
	var res [4]float64
	name := randName("hqbench-dock-")
	port := 5400 + i
	if _, err := d.CLI("rule", "add", "disc", "--container", name, "--dscp", "EF"); err != nil {
		return res, err
	}
	defer d.CLI("rule", "remove", "disc")
	f, err := listenFirst(p.rx, fmt.Sprintf("%s:%d", ctrRxAddr, port), 46)
	if err != nil {
		return res, err
	}
	defer f.Close()
	send := fmt.Sprintf("until ip route | grep -q default; do sleep 0.005; done; exec hostqos tool udp-send --to %s:%d --pps %d --size 64 --duration 60s", ctrRxAddr, port, pps)
	args := append([]string{"run", "-d", "--name", name}, dockerFlags...)
	args = append(args, "--network", "none", image, "sh", "-c", send)
	defer exec.Command("docker", "rm", "-f", name).Run()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		return res, fmt.Errorf("docker run: %w: %s", err, strings.TrimSpace(string(out)))
	}
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		return res, fmt.Errorf("docker inspect %s: %w", name, err)
	}
	pid := strings.TrimSpace(string(out))
	host := fmt.Sprintf("hqd%d", i)
	t0 := time.Now()
	if err := run(p.host, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", pid); err != nil {
		return res, err
	}
	defer run(p.host, "ip", "link", "del", host)
	if err := run(p.host, "ip", "addr", "add", "198.18.3.2/24", "dev", host); err != nil {
		return res, err
	}
	if err := run(p.host, "ip", "link", "set", host, "up"); err != nil {
		return res, err
	}
	for _, c := range [][]string{{"addr", "add", "198.18.3.1/24", "dev", "eth0"}, {"link", "set", "eth0", "up"}, {"route", "add", "default", "via", "198.18.3.2"}} {
		if out, err := exec.Command("nsenter", append([]string{"-t", pid, "-n", "ip"}, c...)...).CombinedOutput(); err != nil {
			return res, fmt.Errorf("ip %s in Docker container %s: %w: %s", strings.Join(c, " "), name, err, strings.TrimSpace(string(out)))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var first, marked, seen time.Time
	for time.Now().Before(deadline) {
		first, marked = f.times()
		if seen = wt.at(name); !marked.IsZero() && !seen.IsZero() {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if first.IsZero() || marked.IsZero() || seen.IsZero() {
		return res, fmt.Errorf("within 10 s of its veth: first packet at %v, first EF at %v, watcher saw it at %v",
			since(t0, first), since(t0, marked), since(t0, seen))
	}
	return [4]float64{ms(first.Sub(t0)), ms(marked.Sub(t0)), ms(marked.Sub(first)), ms(seen.Sub(t0))}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func since(t0, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(t0).Round(time.Millisecond).String()
}

// netnsPool is a set of bare-netns containers: named namespaces
// (prefix + number) each with a veth whose host side (hqc<number>) is in
// node's namespace.
type netnsPool struct {
	node   *testbed.Node
	prefix string
	next   int
	live   []int // numbers, oldest first
}

func (p *netnsPool) name(i int) string { return fmt.Sprintf("%s%05d", p.prefix, i) }

// ipBatch runs `ip -batch -` with lines, in node's namespace (nil: the
// bench's own).
func ipBatch(node *testbed.Node, lines string) error {
	if lines == "" {
		return nil
	}
	cmd := exec.Command("ip", "-force", "-batch", "-")
	if node != nil {
		cmd = node.Command("ip", "-force", "-batch", "-")
	}
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run ip -batch: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// add makes n more containers.
func (p *netnsPool) add(n int) error {
	var ns, links strings.Builder
	for k := 0; k < n; k++ {
		i := p.next
		p.next++
		fmt.Fprintf(&ns, "netns add %s\n", p.name(i))
		fmt.Fprintf(&links, "link add hqc%05d type veth peer name eth0 netns %s\nlink set hqc%05d up\n", i, p.name(i), i)
		p.live = append(p.live, i)
	}
	if err := ipBatch(nil, ns.String()); err != nil {
		return err
	}
	return ipBatch(p.node, links.String())
}

// remove removes the n oldest containers (all with n < 0).
func (p *netnsPool) remove(n int) error {
	if n < 0 || n > len(p.live) {
		n = len(p.live)
	}
	var ns, links strings.Builder
	for _, i := range p.live[:n] {
		fmt.Fprintf(&links, "link del hqc%05d\n", i)
		fmt.Fprintf(&ns, "netns del %s\n", p.name(i))
	}
	p.live = p.live[n:]
	err := ipBatch(p.node, links.String())
	return errors.Join(err, ipBatch(nil, ns.String()))
}

// cpuWindows measures pid's CPU share (of one core) over n windows of
// length w, running during (if not nil) every second meanwhile.
func cpuWindows(e *env, pid, n int, w time.Duration, during func() error) ([]float64, error) {
	var out []float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for k := 0; k < n; k++ {
		c0, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		end := t0.Add(w)
		for time.Now().Before(end) {
			if err := e.ctx.Err(); err != nil {
				return nil, err
			}
			select {
			case <-tick.C:
				if during != nil {
					if err := during(); err != nil {
						return nil, err
					}
				}
			case <-time.After(time.Until(end)):
			}
		}
		c1, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		out = append(out, 100*(c1-c0).Seconds()/time.Since(t0).Seconds())
	}
	return out, nil
}

// waitContainers waits until the daemon lists want containers, all of
// the pool's live ones with a veth; it returns how long that took.
func waitContainers(d *lab.Daemon, pool *netnsPool, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	want := map[string]bool{}
	for _, i := range pool.live {
		want[pool.name(i)] = true
	}
	var last string
	for time.Since(start) < timeout {
		cs, err := ctrList(d)
		if err != nil {
			return 0, err
		}
		ok := 0
		for _, c := range cs {
			if want[c.Name] && len(c.Veths) == 1 {
				ok++
			}
		}
		if ok == len(want) && len(cs) == len(want) {
			return time.Since(start), nil
		}
		last = fmt.Sprintf("%d listed, %d of the %d wanted with their veth", len(cs), ok, len(want))
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("the daemon did not list the %d containers within %v: %s", len(want), timeout, last)
}

// ctrCPU: the daemon's CPU with no containers, with N bare-netns
// containers idle, and while they churn.
func ctrCPU(e *env, r *Report) error {
	n := e.opts.Containers
	if n <= 0 {
		n = 200
	}
	churn := max(1, min(10, n/2))
	windows := e.n(3, 1)
	w := e.dur(10*time.Second, time.Second)
	settle := e.dur(3*time.Second, 300*time.Millisecond)
	tb, err := e.pair("benchctrcpu", "host", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	host := tb.Node("host")
	pool := &netnsPool{node: host, prefix: randName("hqbc") + "-"}
	defer pool.remove(-1)
	cfg := fmt.Sprintf("[containers]\nnetns = [%q]\n\n[[link]]\nname = %q\n\n[[rule]]\nname = \"ctrs\"\ncontainer = %q\ndscp = \"AF11\"\n",
		pool.prefix+"*", host.Iface("peer"), pool.prefix+"*")
	d, err := e.daemon(host, cfg)
	if err != nil {
		return err
	}
	defer d.Stop()
	pid := d.PID()
	r.setup("daemon CPU: the real hostqosd (one managed link, a rule `container = \"<prefix>*\"` dscp AF11, [containers] netns = [\"<prefix>*\"]); %d bare-netns containers, each a named network namespace with a veth into the daemon's; utime+stime of the daemon from /proc/PID/stat over %d windows of %v each (after %v of settling): with none, with %d idle, and while %d are removed and %d made every second (%d kept)", n, windows, w, settle, n, churn, churn, n)
	time.Sleep(settle)
	none, err := cpuWindows(e, pid, windows, w, nil)
	if err != nil {
		return err
	}
	// Beside the daemon, a watcher of the bench's own, stopped before
	// the idle windows: how much of the daemon's time to list them is
	// the finding.
	wt, err := watchIn(host, containers.Config{NetnsNames: []string{pool.prefix + "*"}})
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := pool.add(n); err != nil {
		wt.stop()
		return err
	}
	made := time.Since(t0)
	found, err := waitContainers(d, pool, 60*time.Second)
	if err != nil {
		wt.stop()
		return err
	}
	var watched time.Duration
	for _, i := range pool.live {
		at := wt.at(pool.name(i))
		if at.IsZero() {
			wt.stop()
			return fmt.Errorf("the bench's watcher did not find container %s while the daemon listed it", pool.name(i))
		}
		watched = max(watched, at.Sub(t0)-made)
	}
	if err := wt.stop(); err != nil {
		return fmt.Errorf("run a container watcher: %w", err)
	}
	time.Sleep(settle)
	idle, err := cpuWindows(e, pid, windows, w, nil)
	if err != nil {
		return err
	}
	churned := 0
	busy, err := cpuWindows(e, pid, windows, w, func() error {
		churned += churn
		if err := pool.remove(churn); err != nil {
			return err
		}
		return pool.add(churn)
	})
	if err != nil {
		return err
	}
	caught, err := waitContainers(d, pool, 60*time.Second)
	if err != nil {
		return fmt.Errorf("after the churn: %w", err)
	}
	r.row(append(append([]string{"daemon CPU, no containers (% of a core)"}, spread(none, f2)...), "—", "—")...)
	r.row(append(append([]string{fmt.Sprintf("daemon CPU, %d containers idle (%% of a core)", n)}, spread(idle, f2)...),
		fmt.Sprintf("%+.2f points vs none", median(idle)-median(none)), "≤ 2 % "+mark(median(idle) <= 2))...)
	r.row(append(append([]string{fmt.Sprintf("daemon CPU, %d containers, %d made and %d removed per second (%% of a core)", n, churn, churn)}, spread(busy, f2)...),
		fmt.Sprintf("%+.2f points vs none", median(busy)-median(none)), "—")...)
	r.note("daemon CPU: %d containers made in one batch (%.2f s for ip to make them); after that, a containers.Watcher of the bench's own had found them all within %.2f s and the daemon listed them all, each with its veth, within %.2f s (polled every 50 ms; the daemon's first containers: it verifies and loads the veth classifiers then, and attaches them to each veth); after the churn (%d made and removed) stopped, the daemon listed the %d live ones within %.2f s", n, made.Seconds(), max(0, watched.Seconds()), found.Seconds(), churned, n, caught.Seconds())
	r.metric("list_s_daemon", found.Seconds())
	r.metric("list_s_watcher", max(0, watched.Seconds()))
	r.metric("cpu_pct_median_none", median(none))
	r.metric("cpu_pct_median_idle", median(idle))
	r.metric("cpu_pct_median_churn", median(busy))
	r.metric("containers", float64(n))
	return nil
}
