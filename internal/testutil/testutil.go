// Package testutil is the one set of helpers for tests that need the
// kernel: a need-root skip, a temporary BPF pin directory, a network
// namespace or a pair joined by a veth (built with testbed), code run inside
// a namespace on a locked OS thread, and one receiver that reports the DSCP
// of every packet arriving on an interface. The daemon helper is in the
// daemontest sub-package, so that this one imports no hostqos package but
// testbed and the packages under test can use it from their internal tests.
//
// Everything a helper makes is removed at the test's cleanup, and on SIGINT
// or SIGTERM (then the process exits with status 130). What a killed run
// (SIGKILL, a test timeout) leaves behind carries a marker with the pid of
// its creator; CleanStale, which every helper calls once per process,
// removes it when that process is gone.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hostqos/hostqos/internal/testbed"
	"golang.org/x/sys/unix"
)

// NeedRoot skips the test unless it runs as root.
func NeedRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, BPF, qdiscs)")
	}
}

// RandHex is n random bytes in hex.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BPFFSRoot is where TempPinDir makes its directories.
const BPFFSRoot = "/sys/fs/bpf"

// PinDirPrefix starts the name of every directory TempPinDir makes.
const PinDirPrefix = "hqtest-"

// MarkerDir holds a marker <name>.pid (the creator's pid) for every pin
// directory TempPinDir made.
const MarkerDir = "/run/hostqos-testutil"

const bpfFSMagic = 0xcafe4a11

// TempPinDir makes an empty directory on the BPF filesystem
// (/sys/fs/bpf/hqtest-<random>) and removes it with everything pinned in
// it at cleanup; the test fails if that removal does. It needs root.
func TempPinDir(tb testing.TB) string {
	tb.Helper()
	dir, remove := PinDir(tb)
	tb.Cleanup(func() {
		if err := remove(); err != nil {
			tb.Error(err)
		}
	})
	return dir
}

// PinDir is TempPinDir for a directory that outlives the test asking for
// it (a fixture a package's tests share, removed by its TestMain): remove
// takes it away with everything pinned in it. A signal removes it too,
// and after a crash CleanStale does. Without root or a BPF filesystem tb
// is skipped.
func PinDir(tb testing.TB) (dir string, remove func() error) {
	tb.Helper()
	NeedRoot(tb)
	cleanStaleOnce(tb)
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFSRoot, &st); err != nil || uint32(st.Type) != bpfFSMagic {
		tb.Skipf("no BPF filesystem at %s (statfs: %v)", BPFFSRoot, err)
	}
	name := PinDirPrefix + RandHex(4)
	dir = filepath.Join(BPFFSRoot, name)
	if err := os.MkdirAll(MarkerDir, 0o755); err != nil {
		tb.Fatalf("create %s: %v", MarkerDir, err)
	}
	marker := filepath.Join(MarkerDir, name+".pid")
	if err := os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		tb.Fatalf("write marker of %s: %v", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		_ = os.Remove(marker)
		tb.Fatalf("create pin directory: %v", err)
	}
	rm := func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove pin directory %s: %w", dir, err)
		}
		_ = os.Remove(marker)
		return nil
	}
	unregister := onSignal(func() { _ = rm() })
	return dir, func() error {
		unregister()
		return rm()
	}
}

// CleanStale removes what helpers of runs that died left behind: their
// pin directories and their namespaces (testbed.CleanStale). What belongs
// to live processes is left alone.
func CleanStale() error {
	var errs []error
	ents, err := os.ReadDir(MarkerDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("read %s: %w", MarkerDir, err))
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok || !strings.HasPrefix(name, PinDirPrefix) || strings.ContainsAny(name, "/.") {
			continue
		}
		marker := filepath.Join(MarkerDir, e.Name())
		b, err := os.ReadFile(marker)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(BPFFSRoot, name)); err != nil {
			errs = append(errs, fmt.Errorf("remove stale pin directory %s: %w", name, err))
			continue
		}
		_ = os.Remove(marker)
	}
	if err := testbed.CleanStale(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

var staleOnce sync.Once

// cleanStaleOnce runs CleanStale the first time a helper makes something
// in this process; a failure is logged, not fatal.
func cleanStaleOnce(tb testing.TB) {
	staleOnce.Do(func() {
		if err := CleanStale(); err != nil {
			tb.Logf("clean leftovers of dead test runs: %v", err)
		}
	})
}

// Signal cleanup: what is registered runs (newest first) on SIGINT or
// SIGTERM, and then the process exits with status 130.
var sig struct {
	sync.Mutex
	next    int
	fns     map[int]func()
	started bool
}

// OnSignal registers fn to run if the process gets SIGINT or SIGTERM
// before the returned function unregisters it. Helpers that make
// something outside the process (daemontest) use it.
func OnSignal(fn func()) (unregister func()) { return onSignal(fn) }

func onSignal(fn func()) func() {
	sig.Lock()
	defer sig.Unlock()
	if !sig.started {
		sig.started = true
		sig.fns = map[int]func(){}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-c
			fmt.Fprintf(os.Stderr, "testutil: %v: removing what the running tests made\n", s)
			sig.Lock()
			ids := make([]int, 0, len(sig.fns))
			for id := range sig.fns {
				ids = append(ids, id)
			}
			fns := sig.fns
			sig.fns = map[int]func(){}
			sig.Unlock()
			sort.Sort(sort.Reverse(sort.IntSlice(ids))) // newest first
			for _, id := range ids {
				fns[id]()
			}
			os.Exit(130)
		}()
	}
	id := sig.next
	sig.next++
	sig.fns[id] = fn
	return func() {
		sig.Lock()
		delete(sig.fns, id)
		sig.Unlock()
	}
}
