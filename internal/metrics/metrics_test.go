package metrics

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/observe"
)

// TestScrape: a scrape carries the rules' counters with their direction,
// the apps (beyond max_apps as "other"; a container as one app with its
// name, runtime and image), the datapath's health and the build info, as
// the engine reads them.
func TestScrape(t *testing.T) {
	dir := t.TempDir()
	conf := "[[rule]]\nname = \"web\"\nproto = \"tcp\"\nrport = \"443\"\npolice = \"10mbit\"\n"
	if err := os.WriteFile(filepath.Join(dir, "hostqos.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{ConfigPath: filepath.Join(dir, "hostqos.toml"), StatePath: filepath.Join(dir, "state.json"),
		RuntimePath: filepath.Join(dir, "runtime.json"), CgroupBase: "/hostqos", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	k := fakehost.NewFakeKernel(cg)
	if err := e.Start(engine.Host{Kernel: k}); err != nil {
		t.Fatal(err)
	}
	e.SetHistory(nil, observe.HistoryOptions{MaxApps: 2})
	e.SetContainers([]derive.Container{{Runtime: "docker", ID: "3f4e5d6c7b8a", Name: "db", Image: "docker.io/library/postgres:16",
		NetnsCookie: 77, Veths: []int{7}, VethNames: []string{"veth1"}}})
	e.Tick()
	slot := -1
	for _, r := range k.Rules.Rules {
		if r.PoliceRate > 0 {
			slot = int(r.Slot)
		}
	}
	if slot < 0 {
		t.Fatalf("no policed rule in %+v", k.Rules)
	}
	k.Counters = make([]datapath.Counters, slot+1)
	k.Counters[slot] = datapath.Counters{Bytes: 123456, Packets: 100, Drops: 3}
	// The container's flows (one classified at its veth, one of a socket
	// made in it) come first: it and curl are the two apps named.
	for i, pid := range []uint32{0, 4_000_100} {
		k.FlowTable = append(k.FlowTable, datapath.Flow{
			Key:      datapath.FlowKey{Proto: 6, Local: netip.AddrPortFrom(netip.MustParseAddr("198.19.0.2"), uint16(5000+i)), Remote: netip.MustParseAddrPort("198.18.0.2:443")},
			RuleSlot: -1, PID: pid, UID: 999, Veth: 7,
			Counters: datapath.Counters{Bytes: 700, Packets: 1}, FirstSeenNS: 1, LastSeenNS: 1 << 62,
		})
	}
	for i, comm := range []string{"curl", "wget", "git"} {
		k.FlowTable = append(k.FlowTable, datapath.Flow{
			Key:      datapath.FlowKey{Proto: 6, Local: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uint16(4000+i)), Remote: netip.MustParseAddrPort("198.18.0.2:443")},
			RuleSlot: slot, PID: uint32(4_000_000 + i), Comm: comm, UID: 1000,
			Counters: datapath.Counters{Bytes: 1000, Packets: 1}, FirstSeenNS: 1, LastSeenNS: 1 << 62,
		})
	}
	e.Tick()
	srv := httptest.NewServer(Handler(Source{Engine: e, Version: "1.2.3"}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`hostqos_rule_bytes_total{class="default",direction="out",rule="web"} 123456`,
		`hostqos_rule_bytes_total{class="default",direction="in",rule="web"} 0`,
		`hostqos_rule_drops_total{class="default",direction="out",rule="web"} 3`,
		`hostqos_rule_police_rate_bits_per_second{rule="web"} 1e+07`,
		`hostqos_app_bytes_total{app="curl",container="",direction="out",image="",runtime="",uid="1000"} 1000`,
		`hostqos_app_bytes_total{app="other",container="",direction="out",image="",runtime="",uid="1000"} 2000`,
		`hostqos_app_bytes_total{app="docker/db",container="db",direction="out",image="docker.io/library/postgres:16",runtime="docker",uid=""} 1400`,
		`hostqos_datapath_loaded 1`,
		`hostqos_build_info{goversion="`,
		"go_gc_heap_live_bytes ",
		"go_memstats_heap_alloc_bytes ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}
