package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host/fakehost"
)

// serveAs serves d's API on a Unix socket in dir with short server
// timeouts, every connection as who; it returns a client and a stop.
func serveAs(t *testing.T, d *Daemon, dir string, who *peer) (*api.Client, *http.Server) {
	t.Helper()
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: d.routes(), ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, credKey{}, who)
		}}
	srv.RegisterOnShutdown(func() { close(d.streamsEnd) })
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return api.NewClient(sock), srv
}

// TestEventStream: a follower gets the events of changes in order, over a
// stream that outlives the server's read and write timeouts; resuming
// with since gets what came after; a refusal (a bad since) comes back as
// an answer; the server's shutdown ends the stream at once.
func TestEventStream(t *testing.T) {
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	d.streamsEnd = make(chan struct{})
	if err := d.eng.Start(engine.Host{Kernel: fakehost.NewFakeKernel(dir)}); err != nil {
		t.Fatal(err)
	}
	c, srv := serveAs(t, d, dir, &peer{Privileged: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan api.Event, 16)
	followed := make(chan error, 1)
	since := d.eng.LastEventSeq()
	go func() {
		followed <- c.Events().Follow(ctx, api.EventsOptions{Since: &since, Kinds: []string{"rule"}, NoResume: true},
			func(ev api.Event) error { got <- ev; return nil })
	}()
	root := engine.Caller{Privileged: true}
	for _, name := range []string{"a", "b"} {
		if _, err := d.eng.AddRule(ctx, root, rule(name), false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // past the server's timeouts
	}
	if err := d.eng.RemoveRule(ctx, root, "a"); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, want := range []string{"rule.added rule/a", "rule.added rule/b", "rule.removed rule/a"} {
		select {
		case ev := <-got:
			if ev.Kind+" "+ev.Subject != want {
				t.Fatalf("event %q, want %q", ev.Kind+" "+ev.Subject, want)
			}
			seqs = append(seqs, ev.Seq)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %q", want)
		}
	}
	// Resume after the first: the other two.
	var resumed []string
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	err := c.Events().Follow(rctx, api.EventsOptions{Since: &seqs[0], Kinds: []string{"rule"}}, func(ev api.Event) error {
		resumed = append(resumed, ev.Kind+" "+ev.Subject)
		if len(resumed) == 2 {
			return errors.New("enough")
		}
		return nil
	})
	if err == nil || err.Error() != "enough" || resumed[0] != "rule.added rule/b" || resumed[1] != "rule.removed rule/a" {
		t.Fatalf("resumed: %q, %v", resumed, err)
	}
	// A refusal is an answer, not a stream.
	var ae *api.Error
	if err := c.Events().Follow(ctx, api.EventsOptions{Kinds: []string{"bad kind"}}, func(api.Event) error { return nil }); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("bad kind: %v, want a 400 answer", err)
	}
	// Shutdown waits for open connections: it returns before its deadline
	// only if the daemon ends the stream itself (a stream left open would
	// hold it until the deadline, however generous).
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown with a stream open: %v", err)
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatalf("follow ended with %v, want nil (the daemon ended the stream)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with the server")
	}
}
