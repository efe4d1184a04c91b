package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/traffic"
)

// Users of these tests: nobody, and a second ordinary uid without a passwd
// entry (the daemon knows callers by SO_PEERCRED only).
const (
	uidNobody = 65534
	uidOther  = 64999
)

// attackerEnv selects a mode of the test binary itself, run as an ordinary
// user by the tests below (see attackerMain).
const attackerEnv = "HQ_IT_ATTACKER"

// openForNobody makes the test's files reachable for ordinary users.
func openForNobody(t *testing.T, e *env) {
	t.Helper()
	for _, d := range []string{binDir, e.dir, filepath.Dir(e.dir), filepath.Dir(e.d.Socket)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// asUser is a command run as uid (gid the same) in the client namespace;
// nsenter enters the namespace, then becomes the user.
func (e *env) asUser(uid int, name string, args ...string) *exec.Cmd {
	id := strconv.Itoa(uid)
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + e.client.NetnsName, "-S", id, "-G", id, "--", name}, args...)...)
}

// userHostqos runs the CLI as uid.
func (e *env) userHostqos(uid int, args ...string) (string, error) {
	out, err := e.asUser(uid, hostqosBin(), append([]string{"--socket", e.d.Socket}, args...)...).CombinedOutput()
	return string(out), err
}

// TestUserRunCannotBypassAdminRules: a program nobody
// runs under `hostqos run --class bulk` is still dropped by the admin's
// drop rule (precedence 1000), still policed by the admin's limit and
// still marked with the admin's DSCP; only traffic no admin rule claims
// gets the run's class.
func TestUserRunCannotBypassAdminRules(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface())
	srv := serverV4.Addr().String()
	e.hostqos("rule", "add", "block", "--remote", srv+"/32", "--proto", "udp", "--rport", "7301", "--action", "drop", "--precedence", "1000")
	e.hostqos("rule", "add", "cap", "--remote", srv+"/32", "--proto", "udp", "--rport", "7302", "--police", "1mbit", "--burst", "16KiB")
	e.hostqos("rule", "add", "ef", "--proto", "udp", "--rport", "7303", "--dscp", "EF")

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	for _, p := range []string{"7301", "7302", "7303", "7304"} {
		e.udpSink(srv+":"+p, 30*time.Second)
	}
	runAsNobody := func(port string, send ...string) string {
		args := append([]string{"--socket", e.d.Socket, "run", "--class", "bulk", "--", hostqosBin(),
			"tool", "udp-send", "--to", srv + ":" + port}, send...)
		out, err := e.asUser(uidNobody, hostqosBin(), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("run as nobody to port %s: %v\n%s", port, err, out)
		}
		return string(out)
	}
	runAsNobody("7301", "--pps", "300", "--count", "300", "--size", "100")
	out := runAsNobody("7302", "--rate", "20mbit", "--size", "1000", "--duration", "2s", "-o", "json")
	var sent traffic.SendResult
	decodeLast(t, out, &sent)
	runAsNobody("7303", "--pps", "200", "--count", "20", "--size", "100")
	runAsNobody("7304", "--pps", "200", "--count", "20", "--size", "100")
	time.Sleep(500 * time.Millisecond)

	if _, n := sn.DSCPCounts(unix.IPPROTO_UDP, 7301); n != 0 {
		t.Errorf("admin drop rule: %d of 300 packets of nobody's run reached the receiver, want 0", n)
	}
	_, got := sn.DSCPCounts(unix.IPPROTO_UDP, 7302)
	frame := 1000.0 + 8 + 20 + 14
	allowed := int((1e6/8*sent.DurationS+16<<10)/frame*1.3) + 10
	t.Logf("admin limit: nobody's run sent %d packets in %.2f s, %d reached the receiver (policed at 1 Mbit/s: at most %d)", sent.Packets, sent.DurationS, got, allowed)
	if sent.Packets < uint64(2*allowed) {
		t.Fatalf("the sender sent only %d packets; the limit cannot be told from no limit", sent.Packets)
	}
	if got > allowed {
		t.Errorf("admin limit: %d packets of nobody's run reached the receiver, want at most %d (1 Mbit/s)", got, allowed)
	}
	if st := e.ruleStat("cap"); st.Drops == 0 {
		t.Errorf("admin limit rule dropped nothing: %+v", st)
	}
	allDSCP(t, sn, unix.IPPROTO_UDP, 7303, dscpEF, 20) // the admin's mark, not bulk's LE
	allDSCP(t, sn, unix.IPPROTO_UDP, 7304, dscpLE, 20) // unclaimed traffic: the run's class (bulk, LE)
}

// TestUserRunStaysUnderAdminCgroupRule: `hostqos run`
// moves nobody's process out of its cgroup into hostqos's, yet the
// admin's rules on the cgroup it came from still drop and mark its
// traffic; only traffic no admin rule claims gets the run's class. In
// both cgroup layouts (cgroupLayouts).
func TestUserRunStaysUnderAdminCgroupRule(t *testing.T) {
	parallel(t)
	cgroupLayouts(t, userRunStaysUnderAdminCgroupRule)
}

func userRunStaysUnderAdminCgroupRule(t *testing.T, e *env) {
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface())
	root, err := cgroups.Root()
	if err != nil {
		t.Fatal(err)
	}
	cg := "/hqtest-run-" + strconv.Itoa(os.Getpid()) + "-" + testutil.RandHex(4) + ".slice" // this test's own (tests run in parallel)
	if err := cgroups.Create(root, cg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cgroups.RemoveTree(root, cg) })
	e.hostqos("rule", "add", "drop-cg", "--cgroup", cg, "--proto", "udp", "--rport", "7311", "--action", "drop")
	e.hostqos("rule", "add", "ef-cg", "--cgroup", cg, "--proto", "udp", "--rport", "7312", "--dscp", "EF")

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	srv := serverV4.Addr().String()
	for _, p := range []string{"7311", "7312", "7313"} {
		e.udpSink(srv+":"+p, 30*time.Second)
	}
	// A root shell moves itself into the test cgroup, then becomes nobody
	// (nsenter), who starts the sender under `hostqos run`.
	procs := filepath.Join(root, cg, "cgroup.procs")
	runInCgroup := func(port string) {
		user := e.asUser(uidNobody, hostqosBin(), "--socket", e.d.Socket, "run", "--class", "bulk", "--", hostqosBin(),
			"tool", "udp-send", "--to", srv+":"+port, "--pps", "200", "--count", "20", "--size", "100")
		cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, procs}, user.Args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run as nobody in %s to port %s: %v\n%s", cg, port, err, out)
		}
	}
	for _, p := range []string{"7311", "7312", "7313"} {
		runInCgroup(p)
	}
	time.Sleep(500 * time.Millisecond)

	if _, n := sn.DSCPCounts(unix.IPPROTO_UDP, 7311); n != 0 {
		t.Errorf("admin drop rule on %s: %d of 20 packets of nobody's run reached the receiver, want 0", cg, n)
	}
	allDSCP(t, sn, unix.IPPROTO_UDP, 7312, dscpEF, 20) // the admin's mark, not bulk's LE
	allDSCP(t, sn, unix.IPPROTO_UDP, 7313, dscpLE, 20) // unclaimed traffic: the run's class (bulk, LE)
}

// dscpLE is the mark of the built-in class bulk: Lower Effort (RFC 8622).
const dscpLE = 1

// startUserRun starts `hostqos run --class bulk -- sleep 60` as uid in the
// background; it is killed at cleanup.
func (e *env) startUserRun(uid int) *exec.Cmd {
	e.t.Helper()
	cmd := e.asUser(uid, hostqosBin(), "--socket", e.d.Socket, "run", "--class", "bulk", "--", "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

func (e *env) waitRuns(n int) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, fmt.Sprintf("%d runs", n), func() (bool, string) {
		st := e.status()
		return st.Counts.Runs == n, fmt.Sprintf("%d runs", st.Counts.Runs)
	})
}

// TestUserRunLimits: one ordinary user may have 4 runs
// at once (hostqosd --max-runs-per-user); the fifth is refused with a
// message naming the limit; another user's run and the admin's app rules
// are not blocked by them.
func TestUserRunLimits(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	openForNobody(t, e)
	for range 4 {
		e.startUserRun(uidNobody)
	}
	e.waitRuns(4)
	out, err := e.userHostqos(uidNobody, "run", "--class", "bulk", "--", "true")
	if err == nil || !strings.Contains(out, "--max-runs-per-user 4") {
		t.Errorf("fifth run of nobody: %v\n%s", err, out)
	}
	if out, err := e.userHostqos(uidOther, "run", "--class", "bulk", "--", "true"); err != nil {
		t.Errorf("another user's run while nobody is at the limit: %v\n%s", err, out)
	}
	e.hostqos("rule", "add", "by-exe", "--exe", "/usr/bin/true", "--dscp", "EF")
	e.hostqos("rule", "add", "by-user", "--user", "nobody", "--dscp", "AF41")
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	last := rules[len(rules)-1].Rule
	if !last.UserRun || !strings.HasPrefix(last.Name, "run-") {
		t.Errorf("an ordinary user's run is not evaluated last: %+v", last)
	}
}

// TestUserSeesOnlyOwnRuns: nobody sees their own run,
// not root's or another user's, in GET /v1/runs, rule list/show and stat
// rules; root sees all.
func TestUserSeesOnlyOwnRuns(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface())
	e.start(hostqosBin(), "--socket", e.d.Socket, "run", "--class", "bulk", "--", "sleep", "60")
	e.startUserRun(uidOther)
	e.startUserRun(uidNobody)
	e.waitRuns(3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := e.cli.Runs().List(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("root's view of runs: %v %+v", err, all)
	}
	mine, others := "", map[string]bool{}
	for _, r := range all {
		if r.UID == uidNobody {
			mine = r.Rule
		} else {
			others[r.Rule] = true
		}
	}
	cmd := e.asUser(uidNobody, e.attacker())
	cmd.Env = append(os.Environ(), attackerEnv+"=get", "HQ_IT_SOCKET="+e.d.Socket, "HQ_IT_PATH="+api.Path(api.RouteRuns))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("GET /v1/runs as nobody: %v\n%s", err, raw)
	}
	var seen []api.Run
	if err := json.Unmarshal(raw, &seen); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	if len(seen) != 1 || seen[0].UID != uidNobody {
		t.Errorf("nobody's view of runs = %+v, want only their own", seen)
	}
	userJSON := func(v any, args ...string) {
		t.Helper()
		cmd := e.asUser(uidNobody, hostqosBin(), append(append([]string{"--socket", e.d.Socket}, args...), "-o", "json")...)
		raw, err := cmd.Output()
		if err != nil {
			t.Fatalf("hostqos %s as nobody: %v", strings.Join(args, " "), err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	var rules []api.RuleInfo
	userJSON(&rules, "rule", "list")
	var stats api.Stats
	userJSON(&stats, "stat", "rules")
	names := map[string]bool{}
	for _, r := range rules {
		names[r.Rule.Name] = true
	}
	for _, r := range stats.Rules {
		names["stat:"+r.Rule] = true
	}
	if !names[mine] || !names["stat:"+mine] {
		t.Errorf("nobody does not see their own run's rule %s: %v", mine, names)
	}
	for o := range others {
		if names[o] || names["stat:"+o] {
			t.Errorf("nobody sees another user's run rule %s: %v", o, names)
		}
		if out, err := e.userHostqos(uidNobody, "rule", "show", o); err == nil {
			t.Errorf("rule show %s as nobody succeeded:\n%s", o, out)
		}
	}
	var rootStats api.Stats
	e.hostqosJSON(&rootStats, "stat", "rules")
	if len(rootStats.Rules) < 3 {
		t.Errorf("root's stat rules shows %d rules, want the 3 runs", len(rootStats.Rules))
	}
}

// attacker copies the test binary where ordinary users can run it.
func (e *env) attacker() string {
	e.t.Helper()
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	dst := filepath.Join(e.dir, "attacker")
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	if err := lab.CopyExecutable(self, dst); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// TestRunRefusesChangedOrExitedProcess: the daemon acts
// on the process as it is when the request is handled, not as it was at
// connect time. An attacker (nobody) connects, hands the connection to a
// child and execs a setuid-root program; the child then asks for a run of
// "the caller": refused, and the euid-0 process is not moved. A request
// whose connecting process has exited is refused too.
func TestRunRefusesChangedOrExitedProcess(t *testing.T) {
	parallel(t)
	e := sharedEnv(t)
	openForNobody(t, e)
	exe := e.attacker()
	suid := filepath.Join(e.dir, "suid-sleep")
	if err := lab.CopyExecutable("/bin/sleep", suid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(suid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	attack := func(mode string) (*exec.Cmd, string) {
		t.Helper()
		outPath := filepath.Join(e.dir, mode+".out")
		f, err := os.Create(outPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), attackerEnv+"="+mode, "HQ_IT_SOCKET="+e.d.Socket, "HQ_IT_SETUID="+suid)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uidNobody, Gid: uidNobody}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		if mode == "exit" {
			_ = cmd.Wait() // reap the parent: its PID is gone
		}
		var out string
		eventually(t, 20*time.Second, mode+" attacker's answer", func() (bool, string) {
			b, _ := os.ReadFile(outPath)
			out = string(b)
			return strings.Contains(out, "STATUS "), out
		})
		return cmd, out
	}

	cmd, out := attack("setuid")
	pid := cmd.Process.Pid
	id, err := apps.IdentityOf(pid)
	if err != nil || id.UIDs[1] != 0 {
		t.Fatalf("the attacker did not become euid 0 (setuid exec): %+v %v\n%s", id, err, out)
	}
	if !strings.Contains(out, "STATUS 403") || !strings.Contains(out, "no longer acts as uid 65534") {
		t.Errorf("run for a process that exec'd setuid-root: want 403 naming the identity change, got\n%s", out)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || strings.Contains(string(cg), "/hostqos/") {
		t.Errorf("the euid-0 process was moved: %s %v", cg, err)
	}

	_, out = attack("exit")
	if !strings.Contains(out, "STATUS 400") || !strings.Contains(out, "has exited") {
		t.Errorf("run for an exited process: want 400 \"has exited\", got\n%s", out)
	}
	if st := e.status(); st.Counts.Runs != 0 {
		t.Errorf("%d runs exist after refused requests", st.Counts.Runs)
	}
}

// attackerMain is the test binary run as an ordinary user by the tests
// above, the mode given in HQ_IT_ATTACKER:
//
//	get     GET HQ_IT_PATH, print the JSON answer
//	setuid  connect, start a child holding the connection, exec the
//	        setuid-root HQ_IT_SETUID (sleep 60)
//	exit    connect, start a child holding the connection, exit
//	child   wait until the parent (HQ_IT_PARENT) is euid 0 or gone, then
//	        POST /v1/runs for "the caller" on fd 3; print "STATUS code"
//	        and the body
func attackerMain() int {
	sock := os.Getenv("HQ_IT_SOCKET")
	switch mode := os.Getenv(attackerEnv); mode {
	case "hang", "idle", "noread", "flows", "runs", "blocks": // floods (apiflood_test.go)
		return attackMain(mode)
	case "rsvp-hold": // rsvp_remote_test.go
		return rsvpHoldMain(sock)
	case "events": // the history's event sources (evcap_test.go)
		return eventFloodMain()
	case "qsched": // admit_test.go
		return qschedAttack(sock)
	case "rtchan-steady": // rtchan_owners_test.go
		return rtchanSteadyMain(sock)
	case "opath", "overlimit": // apilimits_test.go
		return apiLimitsAttack(mode)
	case "get":
		var raw json.RawMessage
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := api.NewClient(sock).Get(ctx, os.Getenv("HQ_IT_PATH"), &raw); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Stdout.Write(raw)
		return 0
	case "setuid", "exit":
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println("STATUS dial:", err)
			return 1
		}
		f, err := c.(*net.UnixConn).File()
		if err != nil {
			fmt.Println("STATUS file:", err)
			return 1
		}
		self, _ := os.Executable()
		child := exec.Command(self)
		child.Env = append(os.Environ(), attackerEnv+"=child", "HQ_IT_PARENT="+strconv.Itoa(os.Getpid()), "HQ_IT_WAIT="+mode)
		child.ExtraFiles = []*os.File{f}
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			fmt.Println("STATUS start child:", err)
			return 1
		}
		if mode == "exit" {
			return 0
		}
		err = syscall.Exec(os.Getenv("HQ_IT_SETUID"), []string{"sleep", "60"}, os.Environ())
		fmt.Println("STATUS exec:", err)
		return 1
	case "child":
		ppid, _ := strconv.Atoi(os.Getenv("HQ_IT_PARENT"))
		deadline := time.Now().Add(15 * time.Second)
		for {
			id, err := apps.IdentityOf(ppid)
			if os.Getenv("HQ_IT_WAIT") == "setuid" && err == nil && id.UIDs[1] == 0 {
				break
			}
			if os.Getenv("HQ_IT_WAIT") == "exit" && (err != nil || id.Gone()) {
				break
			}
			if time.Now().After(deadline) {
				fmt.Println("STATUS timeout waiting for the parent:", id, err)
				return 1
			}
			time.Sleep(20 * time.Millisecond)
		}
		if os.Getenv("HQ_IT_WAIT") == "exit" {
			time.Sleep(200 * time.Millisecond) // let the test reap it
		}
		conn := os.NewFile(3, "api")
		body, _ := json.Marshal(api.RunRequest{Class: "bulk", DSCP: policy.NoDSCP, Cmd: "attack"})
		fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: hostqosd\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			fmt.Println("STATUS read answer:", err)
			return 1
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("STATUS %d\n%s\n", resp.StatusCode, bytes.TrimSpace(b))
		return 0
	default:
		fmt.Fprintln(os.Stderr, "unknown attacker mode", mode)
		return 2
	}
}
