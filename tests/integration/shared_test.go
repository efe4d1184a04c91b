package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

// The shared daemon. Most of a daemon's start is the kernel verifying its
// BPF programs, so the tests that check only what the API and the CLI
// answer (validation, refusals, listings, runs), or how the daemon repairs
// its own kernel objects, and measure nothing take a daemon that is
// already running instead of starting their own: started by
// the first test that asks for it, stopped by TestMain (Tetragon's "load
// once per test binary, reset between tests"). A test has it alone; its
// cleanup puts the policy back as the daemon started (sharedDaemon.reset),
// so the tests stay independent. A daemon that cannot be put back, or whose
// test failed, is stopped and the next test starts a fresh one. Tests that
// need a config of their own, kill or restart the daemon, change the
// namespaces, or send traffic keep their own daemon (newEnv).

// sharedDaemon is a client/server pair with a hostqosd in the client that
// outlives the tests using it.
type sharedDaemon struct {
	mu sync.Mutex // held by the test using it
	// While up:
	bed        *testbed.Testbed
	d          *lab.Daemon
	dir        string
	start      policyView
	unregister func()
}

var shared sharedDaemon

// sharedEnv is newEnv and startDaemon for a test that checks only API or
// CLI behaviour: the shared daemon (an empty config), running, with the
// policy it started with. e.dir is the test's own scratch directory, not
// the daemon's.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	testutil.NeedRoot(t)
	s := &shared
	s.mu.Lock()
	e := &env{t: t, dir: t.TempDir()}
	logFrom := -1
	// Registered first, so it runs last: after the test's own cleanups
	// (its programs killed, its sinks closed).
	t.Cleanup(func() {
		defer s.mu.Unlock()
		if s.d == nil {
			return
		}
		if t.Failed() {
			if log := s.d.Log(); logFrom >= 0 && logFrom <= len(log) {
				t.Logf("hostqosd log during the test:\n%s", log[logFrom:])
			}
			s.discard(t, "the test failed")
			return
		}
		if err := s.reset(); err != nil {
			s.discard(t, fmt.Sprintf("reset: %v", err))
		}
	})
	if s.d == nil {
		if err := s.up(); err != nil {
			t.Fatal(err)
		}
	}
	logFrom = len(s.d.Log())
	e.client, e.server = s.bed.Node("client"), s.bed.Node("server")
	e.d, e.cli = s.d, s.d.Client
	return e
}

// up builds the pair and starts the daemon.
func (s *sharedDaemon) up() error {
	bed, err := testbed.Build(testutil.PairTopology("client", "server"))
	if err != nil {
		return fmt.Errorf("build network namespaces: %w", err)
	}
	dir, err := os.MkdirTemp("", "hostqos-it-shared-")
	if err == nil {
		err = os.Chmod(dir, 0o755) // the socket reachable for ordinary users (openForNobody)
	}
	if err != nil {
		_ = bed.Close()
		return fmt.Errorf("make scratch directory: %w", err)
	}
	s.bed, s.dir = bed, dir
	s.d = lab.NewDaemon(bed.Node("client"), binDir, dir)
	s.unregister = testutil.OnSignal(func() { _ = s.stop() })
	if err := s.d.Start(); err != nil {
		_ = s.stop()
		return fmt.Errorf("start shared daemon: %w", err)
	}
	if s.start, err = viewPolicy(s.d.Client); err != nil {
		_ = s.stop()
		return err
	}
	return nil
}

// stop ends the daemon and removes what it and up made.
func (s *sharedDaemon) stop() error {
	if s.d == nil {
		return nil
	}
	s.unregister()
	err := s.d.Stop()
	if cerr := s.bed.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("remove network namespaces: %w", cerr)
	}
	os.RemoveAll(s.dir)
	s.d, s.bed = nil, nil
	return err
}

// discard stops the daemon after a test that may have left it changed; the
// next test starts a fresh one.
func (s *sharedDaemon) discard(t *testing.T, why string) {
	t.Logf("shared daemon stopped (%s); the next test starts a fresh one", why)
	if err := s.stop(); err != nil {
		t.Errorf("stop shared daemon: %v", err)
	}
}

// stopShared stops the shared daemon (TestMain, after the tests).
func stopShared() error { return shared.stop() }

// policyView is what a test can change through the API, as the reset
// compares it: every object by name, the classes in full (a built-in class
// may be changed, not only added).
type policyView struct {
	Links, Rules, Runs, Reservations, Blocks, Protected, RTChannels, RSVPSessions, QSockets []string
	Classes                                                                                 string
}

func viewPolicy(c *api.Client) (policyView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var v policyView
	var errs []error
	names := func(n int, name func(i int) string, err error) []string {
		errs = append(errs, err)
		var out []string
		for i := range n {
			out = append(out, name(i))
		}
		slices.Sort(out)
		return out
	}
	links, err := c.Links().List(ctx)
	v.Links = names(len(links), func(i int) string { return links[i].Name }, err)
	rules, err := c.Rules().List(ctx)
	v.Rules = names(len(rules), func(i int) string { return rules[i].Rule.Name + " (" + rules[i].Source + ")" }, err)
	runs, err := c.Runs().List(ctx)
	v.Runs = names(len(runs), func(i int) string { return runs[i].ID }, err)
	resvs, err := c.Reservations().List(ctx)
	v.Reservations = names(len(resvs), func(i int) string { return resvs[i].Reservation.Name }, err)
	blocks, err := c.Shield().Blocks(ctx)
	v.Blocks = names(len(blocks), func(i int) string { return blocks[i].Prefix.String() }, err)
	prot, err := c.Shield().Protected(ctx)
	v.Protected = names(len(prot), func(i int) string { return prot[i].Addr.String() }, err)
	rts, err := c.RTChannels().List(ctx)
	v.RTChannels = names(len(rts), func(i int) string { return rts[i].Name }, err)
	rsvp, err := c.RSVP().Status(ctx, api.RSVPListQuery{})
	v.RSVPSessions = names(len(rsvp.Sessions), func(i int) string { return rsvp.Sessions[i].Name }, err)
	qs, err := c.QSockets().List(ctx)
	v.QSockets = names(len(qs), func(i int) string { return fmt.Sprint(qs[i].ID) }, err)
	classes, err := c.Classes().List(ctx)
	errs = append(errs, err)
	slices.SortFunc(classes, func(a, b api.ClassInfo) int { return cmp.Compare(a.Class.Name, b.Class.Name) })
	data, err := json.Marshal(classes)
	errs = append(errs, err)
	v.Classes = string(data)
	if err := errors.Join(errs...); err != nil {
		return v, fmt.Errorf("read the shared daemon's policy: %w", err)
	}
	return v, nil
}

// reset puts the policy back as the daemon started: it waits for the
// test's runs to end (their programs are gone by now), removes the rules,
// classes and links the test added, and checks that nothing else differs.
func (s *sharedDaemon) reset() error {
	c := s.d.Client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		runs, err := c.Runs().List(ctx)
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		if len(runs) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runs still there after their programs ended: %+v", runs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := s.removeRules(ctx); err != nil {
		return err
	}
	var startClasses []api.ClassInfo
	if err := json.Unmarshal([]byte(s.start.Classes), &startClasses); err != nil {
		return fmt.Errorf("decode start classes: %w", err)
	}
	classes, err := c.Classes().List(ctx)
	if err != nil {
		return fmt.Errorf("list classes: %w", err)
	}
	for _, k := range classes {
		if !slices.ContainsFunc(startClasses, func(s api.ClassInfo) bool { return s.Class.Name == k.Class.Name }) {
			if err := c.Classes().Remove(ctx, k.Class.Name); err != nil {
				return err
			}
		}
	}
	links, err := c.Links().List(ctx)
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if !slices.Contains(s.start.Links, l.Name) {
			if err := c.Links().Remove(ctx, l.Name); err != nil {
				return err
			}
		}
	}
	now, err := viewPolicy(c)
	if err != nil {
		return err
	}
	if a, b := fmt.Sprintf("%+v", now), fmt.Sprintf("%+v", s.start); a != b {
		return fmt.Errorf("policy after reset differs from the start:\n now   %s\n start %s", a, b)
	}
	return nil
}

// removeRules removes the rules the test added.
func (s *sharedDaemon) removeRules(ctx context.Context) error {
	c := s.d.Client
	rules, err := c.Rules().List(ctx)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	for _, r := range rules {
		if !slices.Contains(s.start.Rules, r.Rule.Name+" ("+r.Source+")") {
			if err := c.Rules().Remove(ctx, r.Rule.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
