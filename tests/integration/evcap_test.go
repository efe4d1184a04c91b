package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // reads the history database the daemon wrote

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

// The event sources of the history flood an ordinary user can drive
// (docs/events.md, "Limits per user and remote host"): qsocket attach and
// detach, and real-time channel requests the link can never admit.

// floodCounts is what the flooding program did, as it prints it.
type floodCounts struct {
	Attached, Detached, Refused, Other int
	Errors                             []string
}

// eventFloodMain is the test binary run as nobody (attacker mode
// "events"): HQ_IT_N rounds of qsocket attach + detach on a new UDP socket
// and, at the same time, HQ_IT_N real-time channel requests on link
// HQ_IT_LINK that are refused; it prints the counts as JSON.
func eventFloodMain() int {
	c := api.NewClient(os.Getenv("HQ_IT_SOCKET"))
	n, _ := strconv.Atoi(os.Getenv("HQ_IT_N"))
	var mu sync.Mutex
	var out floodCounts
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		out.Other++
		if len(out.Errors) < 5 {
			out.Errors = append(out.Errors, err.Error())
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
			if err != nil {
				note(err)
				continue
			}
			if _, err := c.QSockets().Attach(ctx, fd, api.QSockParams{Class: "default"}); err != nil {
				note(err)
			} else {
				mu.Lock()
				out.Attached++
				mu.Unlock()
				if err := c.QSockets().Detach(ctx, fd); err != nil {
					note(err)
				} else {
					mu.Lock()
					out.Detached++
					mu.Unlock()
				}
			}
			syscall.Close(fd)
		}
	}()
	go func() {
		defer wg.Done()
		// 1400 B every 100 µs is 112 Mbit/s: never admitted on 10 Mbit/s.
		req := api.RTChannelRequest{Link: os.Getenv("HQ_IT_LINK"), MessageBytes: 1400, Period: 100 * time.Microsecond, Burst: 1, Delay: time.Millisecond}
		for i := 0; i < n; i++ {
			_, err := c.RTChannels().Admit(ctx, req)
			switch {
			case err != nil && strings.Contains(err.Error(), "refuse real-time channel"):
				mu.Lock()
				out.Refused++
				mu.Unlock()
			case err != nil:
				note(err)
			default:
				note(fmt.Errorf("channel %d admitted", i))
			}
		}
	}()
	wg.Wait()
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return 0
}

// openVoiceForNobody lets ordinary users bind real-time channels to class
// voice, so that nobody's channel requests reach admission (and are refused
// there, as events) instead of being refused the class.
func openVoiceForNobody(e *env) { e.hostqos("class", "set", "voice", "--user-allowed", "true") }

// floodEvents runs eventFloodMain as nobody for n rounds.
func floodEvents(t *testing.T, e *env, n int) floodCounts {
	t.Helper()
	cmd := e.asUser(uidNobody, e.attacker())
	cmd.Env = append(os.Environ(), attackerEnv+"=events", "HQ_IT_SOCKET="+e.d.Socket, "HQ_IT_N="+strconv.Itoa(n), "HQ_IT_LINK="+e.iface())
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("event flood as nobody: %v\n%s", err, raw)
	}
	var c floodCounts
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("event flood's counts %q: %v", raw, err)
	}
	t.Logf("nobody's flood of %d rounds: %+v", n, c)
	if c.Attached == 0 || c.Refused == 0 {
		t.Fatalf("the flood made no events: %+v", c)
	}
	return c
}

// historyEvents reads, from a stopped daemon's history database, the
// events table's rows and bytes, and per kind of nobody's events the rows
// and the events they stand for (a summary's "coalesced" count, else 1).
func historyEvents(t *testing.T, path string) (rows, bytes int64, byKind map[string][2]uint64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(bytes), 0) FROM events`).Scan(&rows, &bytes); err != nil {
		t.Fatal(err)
	}
	q, err := db.Query(`SELECT kind, fields FROM events WHERE owner = ?`, uidNobody)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	byKind = map[string][2]uint64{}
	for q.Next() {
		var kind, fields string
		if err := q.Scan(&kind, &fields); err != nil {
			t.Fatal(err)
		}
		var f struct {
			Coalesced uint64 `json:"coalesced"`
		}
		if fields != "" {
			_ = json.Unmarshal([]byte(fields), &f)
		}
		c := byKind[kind]
		c[0]++
		c[1] += max(f.Coalesced, 1)
		byKind[kind] = c
	}
	return rows, bytes, byKind
}

// fileBytes is the size of the database and its WAL.
func fileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestEventFloodBoundedAsNobody (the history's events table has no cap):
// nobody attaches and detaches qsockets and asks for real-time channels
// the link refuses, as fast as the daemon answers. The live stream shows
// at most 10 of each kind a minute one by one; history keeps its events
// within their row cap and the database within its budget; and at the
// end each kind of nobody's events has one row that counts the rest, so
// that the rows stand for exactly what nobody did.
func TestEventFloodBoundedAsNobody(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.d.ExtraArgs = []string{"--history-max-events", "1000", "--history-max-event-bytes", "1MiB", "--history-max-bytes", "16MiB"}
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	openVoiceForNobody(e)
	openForNobody(t, e)

	// Root follows the stream while nobody floods.
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	live := map[string]int{}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_ = e.cli.Events().Follow(ctx, api.EventsOptions{Kinds: []string{"qsocket", "rtchannel"}, NoResume: true}, func(ev api.Event) error {
			mu.Lock()
			live[ev.Kind]++
			mu.Unlock()
			return nil
		})
	}()
	time.Sleep(200 * time.Millisecond) // the stream is open
	c := floodEvents(t, e, 1500)
	// The stream holds what was published; a last event of root's own
	// marks its end.
	e.hostqos("rule", "add", "marker", "--proto", "udp", "--rport", "9")
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-followed
	mu.Lock()
	t.Logf("the live stream during the flood: %v", live)
	for kind, n := range live {
		// 10 of each kind a minute, and a minute's summary if the
		// flood spanned the end of one.
		if n > 3*(10+1) {
			t.Errorf("the live stream carried %d %s events during the flood, want at most %d", n, kind, 3*(10+1))
		}
	}
	mu.Unlock()

	// SIGTERM: the daemon publishes the summaries it holds, then closes
	// history.
	e.killDaemon(syscall.SIGTERM)
	path := filepath.Join(e.dir, "state", "history.db")
	rows, bytes, byKind := historyEvents(t, path)
	size := fileBytes(path)
	t.Logf("history: %d event rows of %d bytes, database %d bytes; nobody's rows (rows, events) by kind: %v", rows, bytes, size, byKind)
	if rows > 1000 || bytes > 1<<20 || size > 16<<20 {
		t.Errorf("history holds %d events of %d bytes in %d bytes, want at most 1000 events, 1 MiB of them, 16 MiB in all", rows, bytes, size)
	}
	for kind, want := range map[string]int{"qsocket.attached": c.Attached, "qsocket.detached": c.Detached, "rtchannel.refused": c.Refused} {
		got := byKind[kind]
		if got[1] != uint64(want) || got[0] > 3*(10+1) {
			t.Errorf("history: %d rows of nobody's %s standing for %d events, want at most %d rows standing for the %d nobody made",
				got[0], kind, got[1], 3*(10+1), want)
		}
	}
}

// TestPolicyChangesWithHistoryOutOfRoom (a full state directory made
// every policy change fail with ENOSPC): the state directory is a small
// disk shared by the policy state and history, as by default, and is
// filled to below history_min_free. nobody floods events and history
// writes nothing more (the disk's free space stays), status says why, a
// policy change succeeds and survives a restart, and history records again
// once there is room.
func TestPolicyChangesWithHistoryOutOfRoom(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	state := filepath.Join(e.dir, "state")
	testutil.SmallFSAt(t, state, 64<<20)
	e.d.ExtraArgs = []string{"--history-min-free", "16MiB"}
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	openVoiceForNobody(e)
	openForNobody(t, e)
	filler := testutil.Fill(t, state, 3<<20) // 3 MiB left: less than the 16 MiB history leaves
	before := freeBytes(t, state)
	floodEvents(t, e, 500)
	eventually(t, 10*time.Second, "status says history is not recording", func() (bool, string) {
		st := e.status()
		return strings.Contains(strings.Join(st.Warnings, "\n"), "history is not recording"), fmt.Sprint(st.Warnings)
	})
	after := freeBytes(t, state)
	t.Logf("free space: %d bytes with the filler, %d after nobody's flood and a few samples", before, after)
	if after < before-256<<10 {
		t.Errorf("history wrote %d bytes below its reserve", before-after)
	}
	// Policy changes go through and are kept.
	e.hostqos("rule", "add", "after-full", "--proto", "udp", "--rport", "5353", "--dscp", "AF21")
	e.hostqos("class", "set", "bulk", "--dscp", "CS1")
	if out, err := e.hostqosErr("stat", "history", "rules", "--since", "1h"); err != nil {
		t.Errorf("history query while history is out of room: %v\n%s", err, out)
	}
	e.killDaemon(syscall.SIGTERM)
	e.startDaemon()
	if out := e.hostqos("rule", "list"); !strings.Contains(out, "after-full") {
		t.Errorf("the rule added while history was out of room is gone after a restart:\n%s", out)
	}
	// Room again: history records by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "history records again", func() (bool, string) {
		st := e.status()
		return !strings.Contains(strings.Join(st.Warnings, "\n"), "history is not recording"), fmt.Sprint(st.Warnings)
	})
}

// TestHistoryOnItsOwnFullDisk: with --history-db on a file system of its
// own that is full, the daemon serves, policy changes succeed, history
// queries are answered, and status says history is not recording.
func TestHistoryOnItsOwnFullDisk(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	disk := testutil.SmallFS(t, 8<<20)
	e.d.ExtraArgs = []string{"--history-db", filepath.Join(disk, "history.db"), "--history-min-free", "1MiB"}
	e.startDaemon()
	testutil.Fill(t, disk, 0)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	e.hostqos("rule", "add", "on-full", "--proto", "tcp", "--rport", "22", "--dscp", "CS2")
	eventually(t, 10*time.Second, "status says history is not recording", func() (bool, string) {
		st := e.status()
		return strings.Contains(strings.Join(st.Warnings, "\n"), "history is not recording"), fmt.Sprint(st.Warnings)
	})
	if out, err := e.hostqosErr("stat", "history", "links", "--since", "1h"); err != nil {
		t.Errorf("history query with history's disk full: %v\n%s", err, out)
	}
	if out := e.hostqos("rule", "list"); !strings.Contains(out, "on-full") {
		t.Errorf("rule list:\n%s", out)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
