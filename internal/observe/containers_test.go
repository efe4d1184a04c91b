package observe

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
)

// TestContainerIsOneAppInHistory: the flows of a container (classified at
// its veth, whether or not a process of it is known) are one app in
// history and in the metrics' totals, named container:RUNTIME/NAME with its
// runtime, name and image, seen by root and not by an ordinary user, even
// the user its processes run as; its flow records name it; a flow of a
// container that is gone is counted under no name.
func TestContainerIsOneAppInHistory(t *testing.T) {
	src := newFake(t)
	src.ctrs = map[int]Container{7: {Runtime: "docker", Name: "db", Image: "docker.io/library/postgres:16"}}
	o := New(src, nil)
	hs, err := history.Open(filepath.Join(t.TempDir(), "history.db"), history.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	o.SetHistory(hs, HistoryOptions{FlowIdle: time.Hour, MaxApps: 10})
	atVeth := udpFlow(5000, 0, 0, -1, 0) // no socket: the veth's identity
	atVeth.Veth = 7
	inCtr := udpFlow(5001, 4_000_001, 999, -1, 0) // a socket made in the container
	inCtr.Veth = 7
	host := udpFlow(5002, 4_000_002, 1000, -1, 0)
	gone := udpFlow(5003, 0, 0, -1, 0)
	gone.Veth = 8
	src.k.FlowTable = []datapath.Flow{atVeth, inCtr, host, gone}
	o.RecordHistory() // the baseline
	for i, add := range []uint64{100, 200, 50, 70} {
		src.k.FlowTable[i].Bytes += add
	}
	o.RecordHistory()
	src.k.FlowTable = src.k.FlowTable[1:] // atVeth evicted: recorded
	o.RecordHistory()
	if err := hs.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	q := api.HistoryQuery{Kind: history.KindApps, Since: time.Now().Add(-time.Hour)}
	h, err := o.History(context.Background(), q, -1)
	if err != nil {
		t.Fatal(err)
	}
	var ctr *api.HistorySeries
	for i, s := range h.Series {
		if s.Container != "" {
			if ctr != nil {
				t.Errorf("two container series: %+v", h.Series)
			}
			ctr = &h.Series[i]
		}
	}
	if len(h.Series) != 2 || ctr == nil {
		t.Fatalf("apps history %+v: want the container and the host's process", h.Series)
	}
	if ctr.Name != "container:docker/db" || ctr.Container != "db" || ctr.Runtime != "docker" || ctr.Image != "docker.io/library/postgres:16" ||
		ctr.UID != nil || ctr.Total.BytesOut != 300 {
		t.Errorf("container db's history %+v; want container:docker/db, its image, no uid, 300 bytes out", *ctr)
	}
	for _, uid := range []int64{999, 1000} {
		h, _ := o.History(context.Background(), q, uid)
		for _, s := range h.Series {
			if s.Container != "" {
				t.Errorf("uid %d sees container %s", uid, s.Name)
			}
		}
	}
	var totals []AppCounters
	for _, a := range o.AppTotals() {
		if a.Container != "" {
			totals = append(totals, a)
		}
	}
	if len(totals) != 1 || totals[0].Container != "db" || totals[0].Runtime != "docker" || totals[0].Image != "docker.io/library/postgres:16" ||
		totals[0].BytesOut != 300 {
		t.Errorf("app totals of containers %+v; want db's 300 bytes", totals)
	}

	h, err = o.History(context.Background(), api.HistoryQuery{Kind: api.HistoryFlows, Name: "container:docker/db", Since: time.Now().Add(-time.Hour)}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flows) != 1 || h.Flows[0].Local != "198.18.0.1:5000" || h.Flows[0].Container != "db" || h.Flows[0].Runtime != "docker" ||
		h.Flows[0].Image != "docker.io/library/postgres:16" {
		t.Errorf("flow records of container:docker/db %+v; want the evicted flow of its veth, named", h.Flows)
	}
}
