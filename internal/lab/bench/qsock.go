package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// benchQSock: seed Table 1 — the cost of each QSockets call beside its
// plain socket counterpart, measured by libhostqos/examples/qsock_bench
// (C, built here with the system compiler) against the real daemon.
func benchQSock(e *env, r *Report) error {
	sends := e.n(200000, 20000)
	src, err := libhostqosDir()
	if err != nil {
		return err
	}
	if out, err := exec.Command("make", "-s", "-C", src, "examples").CombinedOutput(); err != nil {
		return fmt.Errorf("build libhostqos examples: %w: %s", err, strings.TrimSpace(string(out)))
	}
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace managing the sender's veth (egress_rate 10gbit, an HTB tree); libhostqos (C, -O2) over the API socket; socket/qsocket, qattach, qchange (beside setsockopt(IP_TOS), today's way to mark a socket), qinfo and close/qclose 200 times each; sendto vs qsendto of %d 64-byte UDP datagrams each to the peer, in alternating blocks of 10,000, on one UDP socket, one qsocket (class interactive, fifo) and one qsocket with a per-message scheduler (edf-lossless at 4 Gbit/s — far above what one thread of 64-byte sends offers, so its rate never holds a message back and the figure is the scheduler's per-message work —, a deadline 1 s ahead on every message: SCM_TXTIME, the host's scheduler deciding each packet)", sends)
	r.Columns = []string{"call", "plain socket", "QSockets", "overhead", "target", "seed: sockets / QSockets"}
	tb, err := e.pair("benchqsock", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	d, err := e.daemon(app, fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"10gbit\"\n", app.Iface("peer")))
	if err != nil {
		return err
	}
	defer d.Stop()
	cmd := app.Command(filepath.Join(src, "examples", "qsock_bench"), "198.18.0.2", "9", strconv.Itoa(sends))
	cmd.Env = append(os.Environ(), "HOSTQOS_SOCKET="+d.Socket)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("run qsock_bench: %w: %s", err, strings.TrimSpace(string(out)))
	}
	line := regexp.MustCompile(`(?m)^call=(\S+)(?: plain_us=(\S+))? q_us=(\S+)`)
	got := map[string][2]float64{}
	for _, m := range line.FindAllStringSubmatch(string(out), -1) {
		plain, _ := strconv.ParseFloat(m[2], 64)
		q, _ := strconv.ParseFloat(m[3], 64)
		got[m[1]] = [2]float64{plain, q}
	}
	us := func(v float64) string { return fmt.Sprintf("%.2f µs", v) }
	seed := map[string]string{
		"qsocket": "871 / 944 µs", "qattach": "— / 85 µs (49 µs)", "qchange": "— / 97 µs", "qinfo": "— / 20 µs",
		"qclose": "63 / 89 µs", "qsendto": "1272 / 1475 µs (+8.3 … +15.9 %)",
		"qsendto_txtime": "1272 / 1475 µs (+8.3 … +15.9 %)",
	}
	name := map[string]string{"qsendto_txtime": "qsendto, edf-lossless + deadline"}
	for _, c := range []struct{ name, plain string }{
		{"qsocket", "socket()"}, {"qattach", ""}, {"qchange", "setsockopt(IP_TOS)"}, {"qinfo", ""}, {"qclose", "close()"}, {"qsendto", "sendto()"},
		{"qsendto_txtime", "sendto()"},
	} {
		v, ok := got[c.name]
		if !ok {
			return fmt.Errorf("qsock_bench printed no %s line:\n%s", c.name, out)
		}
		plain, over, target := "—", "—", ""
		if c.plain != "" {
			plain = c.plain + " " + us(v[0])
			over = fmt.Sprintf("%+.1f %%", 100*(v[1]-v[0])/v[0])
		}
		if c.name == "qsendto" || c.name == "qsendto_txtime" {
			target = "≤ +10 % " + mark(v[1] <= v[0]*1.10)
			r.metric(c.name+"_overhead_pct", 100*(v[1]-v[0])/v[0])
		}
		label := c.name
		if n, ok := name[c.name]; ok {
			label = n
		}
		r.row(label, plain, us(v[1]), over, target, seed[c.name])
		r.metric(c.name+"_us", v[1])
	}
	r.note("the seed's times are on a dual P2-400 with a 10 Mbit/s NIC and a kernel module (a system call per operation); ours are calls to a daemon over its Unix socket (qsocket, qattach, qchange, qinfo: an HTTP request each, the socket passed with SCM_RIGHTS) and, for qsendto, the library's scheduler step plus one transmit-timestamp sample in 16 messages; qclose is close(): the kernel frees the qsocket")
	for _, m := range regexp.MustCompile(`(?m)^qinfo id=.*`).FindAllString(string(out), -1) {
		r.note("a qsocket's own feedback after the run: %s", m)
	}
	return nil
}

// libhostqosDir finds libhostqos/ from the working directory up (the
// benchmark runs from the source tree).
func libhostqosDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "libhostqos")
		if _, err := os.Stat(filepath.Join(p, "Makefile")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find libhostqos: not in %s or above; run the benchmark from the hostqos source tree", dir)
		}
		dir = parent
	}
}
