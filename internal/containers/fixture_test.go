package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ids of the fixture's containers.
func fid(c byte) string { return strings.Repeat(string(c), 64) }

// fixture is a fake host: cgroup v2 and v1 trees, /proc with network
// namespace files (one regular file per namespace, hard-linked into every
// process of it), runtime files and API sockets, in a temporary directory.
type fixture struct {
	t     *testing.T
	dir   string
	cfg   Config
	ns    map[string]string // namespace name -> its file
	infos map[nsKey]nsInfo  // what inspecting a namespace shows
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, ns: map[string]string{}, infos: map[nsKey]nsInfo{}}
	f.cfg = Config{
		CgroupRoot: filepath.Join(dir, "unified"), CgroupV1: filepath.Join(dir, "v1"),
		ProcRoot: filepath.Join(dir, "proc"), NetnsDir: filepath.Join(dir, "netns"),
		DockerSocket: "-", PodmanSocket: "-",
		DockerRoot: filepath.Join(dir, "docker"), PodmanStorage: filepath.Join(dir, "storage"),
		ContainerdState: filepath.Join(dir, "containerd"),
	}
	for _, d := range []string{f.cfg.CgroupRoot, filepath.Join(f.cfg.CgroupV1, "pids"), f.cfg.ProcRoot, f.cfg.NetnsDir} {
		f.mkdir(d)
	}
	f.write(filepath.Join(f.cfg.CgroupV1, "pids", "cgroup.procs"), "1\n")
	f.netns("self", nsInfo{})
	return f
}

func (f *fixture) mkdir(d string) {
	f.t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) write(path, text string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(path))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) key(path string) nsKey {
	f.t.Helper()
	k, err := statNS(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

// netns makes a network namespace named name that inspects as info.
func (f *fixture) netns(name string, info nsInfo) {
	path := filepath.Join(f.dir, "nsfiles", name)
	f.write(path, "")
	f.ns[name] = path
	f.infos[f.key(path)] = info
}

// proc makes process pid, in namespace ns.
func (f *fixture) proc(pid int, ns string) {
	f.t.Helper()
	d := filepath.Join(f.cfg.ProcRoot, strconv.Itoa(pid), "ns")
	f.mkdir(d)
	if err := os.Link(f.ns[ns], filepath.Join(d, "net")); err != nil {
		f.t.Fatal(err)
	}
}

// cgroup makes a cgroup (rel below the v2 root, or below v1/pids with
// v1) holding pid (0: none).
func (f *fixture) cgroup(v1 bool, rel string, pid int) {
	root := f.cfg.CgroupRoot
	if v1 {
		root = filepath.Join(f.cfg.CgroupV1, "pids")
	}
	procs := ""
	if pid > 0 {
		procs = fmt.Sprintf("%d\n", pid)
	}
	f.write(filepath.Join(root, rel, "cgroup.procs"), procs)
}

func (f *fixture) scanner() *scanner {
	f.t.Helper()
	s, err := newScanner(f.cfg.withDefaults(), slog.New(slog.DiscardHandler))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(s.close)
	s.selfKey = f.key(f.ns["self"])
	s.inspect = func(path string) (nsInfo, error) {
		info, ok := f.infos[f.key(path)]
		if !ok {
			return nsInfo{}, fmt.Errorf("no such namespace %s", path)
		}
		return info, nil
	}
	return s
}

// serveAPI answers GET /containers/json on a Unix socket with list.
func serveAPI(t *testing.T, sock string, list any) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/containers/json" || r.URL.Query().Get("all") != "0" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(list)
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
}

func byID(list []Container) map[string]Container {
	m := map[string]Container{}
	for _, c := range list {
		m[c.ID] = c
	}
	return m
}

func TestClassify(t *testing.T) {
	id := fid('a')
	task := func(ns, id string) bool { return ns == "default" && id == "web" }
	for _, tc := range []struct {
		parent, base string
		rt           Runtime
		id           string
	}{
		{"system.slice", "docker-" + id + ".scope", Docker, id},
		{"docker", id, Docker, id},
		{"libpod_parent", "libpod-" + id, Podman, id},
		{"machine.slice", "libpod-" + id + ".scope", Podman, id},
		{"machine.slice", "libpod-" + id, Podman, id},
		{"libpod_parent", id, Podman, id},
		{"kubepods-besteffort-pod1.slice", "cri-containerd-" + id + ".scope", Containerd, id},
		{"k8s.io", id, Containerd, id},
		{"default", "web", Containerd, "web"},
		{"machine.slice", "libpod-conmon-" + id + ".scope", "", ""},
		{"system.slice", "docker-" + id[:63] + ".scope", "", ""},
		{"system.slice", "docker.service", "", ""},
		{"other", "web", "", ""},
		{"", strings.ToUpper(id), "", ""},
	} {
		rt, gotID, ok := classify(tc.parent, tc.base, task)
		if rt != tc.rt || gotID != tc.id || ok != (tc.rt != "") {
			t.Errorf("classify(%q, %q) = %q, %q, %v; want %q, %q", tc.parent, tc.base, rt, gotID, ok, tc.rt, tc.id)
		}
	}
}

// TestScanFixture finds each runtime's layouts, keeps only containers of
// the daemon's network namespace, and takes names from the API, then the
// runtime's files, then the short id.
func TestScanFixture(t *testing.T) {
	f := newFixture(t)
	vethA := []Veth{{Ifindex: 7, Name: "vetha"}}
	f.netns("a", nsInfo{cookie: 1001, veths: vethA, nsid: 1})
	f.netns("b", nsInfo{cookie: 1002, veths: []Veth{{Ifindex: 8, Name: "vethb"}}, nsid: 2})
	f.netns("c", nsInfo{cookie: 1003, veths: []Veth{{Ifindex: 9, Name: "vethc"}}, nsid: 3})
	f.netns("other", nsInfo{cookie: 1004, nsid: -1}) // no veth to us
	f.netns("bare", nsInfo{cookie: 1005, veths: []Veth{{Ifindex: 10, Name: "vethbare"}}, nsid: 5})
	f.netns("bare-unlinked", nsInfo{cookie: 1006, nsid: -1})
	for pid, ns := range map[int]string{101: "a", 102: "b", 103: "c", 104: "a", 106: "other", 107: "self", 108: "b", 109: "c", 110: "bare"} {
		f.proc(pid, ns)
	}
	f.cgroup(false, "/system.slice/docker-"+fid('a')+".scope", 101)
	f.cgroup(false, "/docker/"+fid('b'), 102)
	f.cgroup(false, "/libpod_parent/libpod-"+fid('c'), 103)
	f.cgroup(false, "/libpod_parent/conmon", 1)
	f.cgroup(false, "/machine.slice/libpod-conmon-"+fid('c')+".scope", 1)
	f.cgroup(false, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-"+fid('d')+".scope", 0)
	f.cgroup(false, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-"+fid('d')+".scope/init", 104)
	f.cgroup(false, "/k8s.io/"+fid('e'), 0)   // no process: stopped
	f.cgroup(false, "/docker/"+fid('f'), 106) // not our namespace
	f.cgroup(false, "/docker/"+fid('0'), 107) // host network
	f.cgroup(true, "/docker/"+fid('1'), 108)  // only in v1
	f.cgroup(true, "/libpod_parent/libpod-"+fid('c'), 103)
	f.cgroup(false, "/default/web", 109) // containerd cgroupfs, any id
	f.write(filepath.Join(f.cfg.ContainerdState, "io.containerd.runtime.v2.task/default/web/config.json"),
		`{"annotations":{"nerdctl/name":"web-1","io.kubernetes.cri.image-name":"img/web:1"}}`)
	f.write(filepath.Join(f.cfg.ContainerdState, "io.containerd.runtime.v2.task/k8s.io/"+fid('d')+"/config.json"),
		`{"annotations":{"io.kubernetes.cri.container-name":"app","io.kubernetes.cri.sandbox-name":"pod-x","io.kubernetes.cri.image-name":"reg/app:2"}}`)
	// Docker: the API knows a, the files know b.
	f.cfg.DockerSocket = filepath.Join(f.dir, "docker.sock")
	serveAPI(t, f.cfg.DockerSocket, []map[string]any{
		{"Id": fid('a'), "Names": []string{"/web-a"}, "Image": "nginx:1", "Labels": map[string]string{"tier": "front"}},
	})
	f.write(filepath.Join(f.cfg.DockerRoot, "containers", fid('b'), "config.v2.json"),
		`{"Name":"/db-b","Config":{"Image":"postgres:16","Labels":{"tier":"back"}}}`)
	// Podman: no API; containers.json and libpod's database.
	f.write(filepath.Join(f.cfg.PodmanStorage, "overlay-containers", "containers.json"),
		`[{"id":"`+fid('c')+`","names":["cache-c"],"metadata":"{\"image-name\":\"localhost/redis:7\"}"}]`)
	f.write(filepath.Join(f.cfg.PodmanStorage, "libpod", "bolt_state.db"),
		"\x00\x01junk"+`{"spec":{"ociVersion":"1.0.2","process":{"args":["x"]}},"id":"`+fid('c')+`","name":"cache-c","labels":{"k":"v"}}`+"\x00more")
	f.cfg.NetnsNames = []string{"ctr-*"}
	if err := os.Link(f.ns["bare"], filepath.Join(f.cfg.NetnsDir, "ctr-bare")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f.ns["bare-unlinked"], filepath.Join(f.cfg.NetnsDir, "ctr-nolink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f.ns["a"], filepath.Join(f.cfg.NetnsDir, "ctr-of-docker")); err != nil { // a's: named after the runtime's container
		t.Fatal(err)
	}
	if err := os.Link(f.ns["b"], filepath.Join(f.cfg.NetnsDir, "unmatched")); err != nil {
		t.Fatal(err)
	}

	s := f.scanner()
	changed, _ := s.scan(true)
	if !changed {
		t.Error("first scan: not changed")
	}
	got := byID(s.list())
	want := map[string]Container{
		fid('a'): {Runtime: Docker, ID: fid('a'), Name: "web-a", Image: "nginx:1", Labels: map[string]string{"tier": "front"},
			Cgroup: "/system.slice/docker-" + fid('a') + ".scope", PID: 101, NetnsCookie: 1001, Veths: vethA},
		fid('b'): {Runtime: Docker, ID: fid('b'), Name: "db-b", Image: "postgres:16", Labels: map[string]string{"tier": "back"},
			Cgroup: "/docker/" + fid('b'), PID: 102, NetnsCookie: 1002, Veths: []Veth{{8, "vethb"}}},
		fid('c'): {Runtime: Podman, ID: fid('c'), Name: "cache-c", Image: "localhost/redis:7", Labels: map[string]string{"k": "v"},
			Cgroup: "/libpod_parent/libpod-" + fid('c'), PID: 103, NetnsCookie: 1003, Veths: []Veth{{9, "vethc"}}},
		fid('d'): {Runtime: Containerd, ID: fid('d'), Name: "pod-x/app", Image: "reg/app:2",
			Labels: map[string]string{"io.kubernetes.cri.container-name": "app", "io.kubernetes.cri.sandbox-name": "pod-x", "io.kubernetes.cri.image-name": "reg/app:2"},
			Cgroup: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-" + fid('d') + ".scope",
			PID:    104, NetnsCookie: 1001, Veths: vethA},
		fid('0'): {Runtime: Docker, ID: fid('0'), Name: fid('0')[:12], Cgroup: "/docker/" + fid('0'), PID: 107, HostNetwork: true},
		fid('1'): {Runtime: Docker, ID: fid('1'), Name: fid('1')[:12], PID: 108, NetnsCookie: 1002, Veths: []Veth{{8, "vethb"}}},
		"web": {Runtime: Containerd, ID: "web", Name: "web-1", Image: "img/web:1",
			Labels: map[string]string{"nerdctl/name": "web-1", "io.kubernetes.cri.image-name": "img/web:1"},
			Cgroup: "/default/web", PID: 109, NetnsCookie: 1003, Veths: []Veth{{9, "vethc"}}},
		"ctr-bare": {Runtime: Netns, ID: "ctr-bare", Name: "ctr-bare", PID: 110, NetnsCookie: 1005, Veths: []Veth{{10, "vethbare"}}},
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s %s not found", w.Runtime, id)
			continue
		}
		if !g.equal(w) {
			t.Errorf("%s:\n got %+v\nwant %+v", id, g, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("found %s %s, which is not a container of this namespace", g.Runtime, id)
		}
	}
	if changed, _ := s.scan(false); changed {
		t.Error("second scan of the same tree: changed")
	}

	// A container's process exits, another's cgroup goes: both disappear.
	f.write(filepath.Join(f.cfg.CgroupRoot, "docker", fid('b'), "cgroup.procs"), "")
	if err := os.RemoveAll(filepath.Join(f.cfg.CgroupRoot, "libpod_parent", "libpod-"+fid('c'))); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(f.cfg.CgroupV1, "pids", "libpod_parent", "libpod-"+fid('c'))); err != nil {
		t.Fatal(err)
	}
	if changed, _ := s.scan(false); !changed {
		t.Error("scan after removals: not changed")
	}
	got = byID(s.list())
	if _, ok := got[fid('b')]; ok {
		t.Error("container without processes still listed")
	}
	if _, ok := got[fid('c')]; ok {
		t.Error("removed container still listed")
	}
	if len(got) != len(want)-2 {
		t.Errorf("after removals: %d containers, want %d", len(got), len(want)-2)
	}
}

// TestPodmanAPI takes Podman's names and labels from its API when it
// answers, and keeps the files' answer when it does not.
func TestPodmanAPI(t *testing.T) {
	f := newFixture(t)
	f.netns("a", nsInfo{cookie: 1, veths: []Veth{{Ifindex: 3, Name: "v"}}, nsid: 0})
	f.proc(200, "a")
	f.cgroup(false, "/machine.slice/libpod-"+fid('c')+".scope", 200)
	f.cfg.PodmanSocket = filepath.Join(f.dir, "podman.sock")
	serveAPI(t, f.cfg.PodmanSocket, []map[string]any{
		{"Id": fid('c'), "Names": []string{"api-name"}, "Image": "localhost/x:1", "Labels": map[string]string{"from": "api"}},
		{"Id": "not-an-id", "Names": []string{"bad"}},
	})
	s := f.scanner()
	s.scan(true)
	l := s.list()
	if len(l) != 1 || l[0].Name != "api-name" || l[0].Image != "localhost/x:1" || l[0].Labels["from"] != "api" {
		t.Fatalf("got %+v, want the API's name, image and labels", l)
	}
}

func TestAPIAnswerBounded(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	big := make([]map[string]any, 0)
	label := strings.Repeat("x", 200)
	for i := 0; len(big)*300 < maxAPIResponse+1000; i++ {
		big = append(big, map[string]any{"Id": fid('a'), "Names": []string{"/n"}, "Labels": map[string]string{"l": label}})
	}
	serveAPI(t, sock, big)
	if _, err := listAPI(sock); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("oversized answer: err = %v, want one naming the bound", err)
	}
}

func TestBoundLabels(t *testing.T) {
	in := map[string]string{"long-value": strings.Repeat("v", MaxLabelValue+1), strings.Repeat("k", MaxLabelKey+1): "x"}
	for i := range MaxLabels + 10 {
		in[fmt.Sprintf("k%03d", i)] = "v"
	}
	out := boundLabels(in)
	if len(out) != MaxLabels {
		t.Errorf("%d labels kept, want %d", len(out), MaxLabels)
	}
	if _, ok := out["long-value"]; ok {
		t.Error("a label with an oversized value was kept")
	}
	if _, ok := out["k000"]; !ok {
		t.Error("the first label in key order was dropped")
	}
	if got := cut("héllo", 2); got != "h" {
		t.Errorf("cut in a rune: %q, want %q", got, "h")
	}
}

// TestWatcherFixture sees a container cgroup appear and go through inotify
// well before the backstop rescan.
func TestWatcherFixture(t *testing.T) {
	f := newFixture(t)
	f.netns("a", nsInfo{cookie: 1, veths: []Veth{{Ifindex: 3, Name: "v"}}, nsid: 0})
	f.proc(300, "a")
	f.cgroup(false, "/docker/"+fid('a'), 300)
	f.cfg.Interval = time.Hour
	s := f.scanner()
	w := newWatcher(s, slog.New(slog.DiscardHandler))
	gen0, l := w.Snapshot()
	if len(l) != 1 {
		t.Fatalf("initial snapshot: %+v", l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, ok func([]Container) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			if _, l := w.Snapshot(); ok(l) {
				return
			}
			select {
			case <-w.Changed():
			case <-deadline:
				_, l := w.Snapshot()
				t.Fatalf("%s: not seen within 5 s; have %+v", what, l)
			}
		}
	}
	// The cgroup first, the process a moment later (as runtimes do).
	f.proc(301, "a")
	f.mkdir(filepath.Join(f.cfg.CgroupRoot, "docker", fid('b')))
	time.Sleep(50 * time.Millisecond)
	f.write(filepath.Join(f.cfg.CgroupRoot, "docker", fid('b'), "cgroup.procs"), "301\n")
	waitFor("new container", func(l []Container) bool { return len(byID(l)[fid('b')].Veths) == 1 })
	// A parent directory the runtime makes later.
	f.proc(302, "a")
	f.cgroup(false, "/system.slice/docker-"+fid('c')+".scope", 302)
	waitFor("container in a new parent", func(l []Container) bool { return byID(l)[fid('c')].PID == 302 })
	if err := os.RemoveAll(filepath.Join(f.cfg.CgroupRoot, "docker", fid('a'))); err != nil {
		t.Fatal(err)
	}
	waitFor("removal", func(l []Container) bool { _, ok := byID(l)[fid('a')]; return !ok })
	if gen, _ := w.Snapshot(); gen == gen0 {
		t.Error("generation unchanged after changes")
	}
}

// TestDelegatedCgroupsIgnored: a cgroup subtree delegated to a user is not
// searched, so a user cannot pass a cgroup of theirs off as a container.
func TestDelegatedCgroupsIgnored(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	f := newFixture(t)
	f.proc(400, "self")
	f.proc(401, "self")
	f.cgroup(false, "/docker/"+fid('a'), 400)
	user := filepath.Join(f.cfg.CgroupRoot, "user.slice", "user@1000.service")
	f.cgroup(false, "/user.slice/user@1000.service/app.slice/docker-"+fid('b')+".scope", 401)
	if err := os.Chown(user, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	f.cgroup(false, "/system.slice/docker-"+fid('c')+".scope", 401)
	if err := os.Chown(filepath.Join(f.cfg.CgroupRoot, "system.slice", "docker-"+fid('c')+".scope"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	s := f.scanner()
	s.scan(true)
	l := s.list()
	if len(l) != 1 || l[0].ID != fid('a') || !l[0].HostNetwork {
		t.Fatalf("found %+v, want only the root-owned host-network container %s", l, fid('a')[:12])
	}
}

func TestParseBoltLabels(t *testing.T) {
	cfg := func(id byte, labels string) string {
		return `{"spec":{"process":{"args":["x"]},"annotations":{"a":"b"}},"id":"` + fid(id) + `","name":"n","labels":` + labels + `,"x":[1,2]}`
	}
	data := "\x00\x00" + cfg('a', `{"k":"1"}`) + "\x07\x08" + cfg('b', `{"k":"2","j":"3"}`) +
		`{"spec":{"truncated` + "\x00\x00" + cfg('a', `{"k":"stale"}`) + `{"spec":{}}` + cfg('c', `null`)
	got := parseBoltLabels([]byte(data))
	want := map[string]map[string]string{fid('a'): {"k": "1"}, fid('b'): {"k": "2", "j": "3"}, fid('c'): nil}
	if len(got) != len(want) {
		t.Fatalf("got %d configurations %v, want %d", len(got), got, len(want))
	}
	for id, labels := range want {
		if md, ok := got[id]; !ok || !maps.Equal(md.labels, labels) {
			t.Errorf("%s: got %v (found %v), want %v", id[:12], md.labels, ok, labels)
		}
	}
}

// TestScanPendingUntilOurNamespace: a new container whose process is not
// in a namespace of ours yet (a runtime's init joins the cgroup before
// the container's namespace) is re-checked soon, and found once it is
// there; one that stays elsewhere stops being re-checked after
// pendingFor.
func TestScanPendingUntilOurNamespace(t *testing.T) {
	f := newFixture(t)
	f.netns("a", nsInfo{cookie: 1, veths: []Veth{{Ifindex: 3, Name: "v"}}, nsid: 0})
	f.netns("other", nsInfo{cookie: 2, nsid: -1})
	f.proc(400, "other")
	f.cgroup(false, "/libpod_parent/libpod-"+fid('c'), 400)
	s := f.scanner()
	if changed, pending := s.scan(true); changed || !pending {
		t.Fatalf("a new container's process in another namespace: changed %v pending %v, want not changed and pending", changed, pending)
	}
	// Its init enters the container's namespace.
	if err := os.Remove(filepath.Join(f.cfg.ProcRoot, "400", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f.ns["a"], filepath.Join(f.cfg.ProcRoot, "400", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	if changed, _ := s.scan(false); !changed || len(byID(s.list())[fid('c')].Veths) != 1 {
		t.Fatalf("after its process joined a namespace of ours: changed %v, list %+v", changed, s.list())
	}
	// A container that stays in another namespace settles.
	f.proc(401, "other")
	f.cgroup(false, "/libpod_parent/libpod-"+fid('d'), 401)
	if _, pending := s.scan(false); !pending {
		t.Fatal("a second new container elsewhere: not pending")
	}
	for k := range s.firstSeen {
		s.firstSeen[k] = s.firstSeen[k].Add(-pendingFor)
	}
	if _, pending := s.scan(false); pending {
		t.Error("a container elsewhere for longer than pendingFor: still pending")
	}
}
