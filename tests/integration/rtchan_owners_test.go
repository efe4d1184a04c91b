package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/rtchan"
)

// rtchanSteadyMain is the test binary as a second process with a
// compliant real-time channel: it opens one through the daemon
// (HQ_IT_LINK, to HQ_IT_DEST) and sends a 1000-byte message every 12 ms
// (within the 10 ms declared), each ending in its sequence number and
// send time, until killed.
func rtchanSteadyMain(sock string) int {
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		fmt.Println("STATUS listen:", err)
		return 1
	}
	h, err := rtchan.NewUDPHost(conn, rtchan.UDPParams(10_000_000), rtchan.DefaultPolicy())
	if err != nil {
		fmt.Println("STATUS host:", err)
		return 1
	}
	h.UseDaemon(sock, os.Getenv("HQ_IT_LINK"))
	id, err := h.Create(os.Getenv("HQ_IT_DEST"), rtChanSpec("steady"))
	if err != nil {
		fmt.Println("STATUS create:", err)
		return 1
	}
	fmt.Println("READY")
	var last time.Time
	for i := 0; ; i++ {
		// At least 12 ms after the previous one, never sooner even when a
		// sleep overran: the library never holds a message to its logical
		// arrival time, so the time it carries is that arrival.
		time.Sleep(time.Until(last.Add(12 * time.Millisecond)))
		last = time.Now()
		buf := make([]byte, 1000) // the library sends it later: not reused
		binary.BigEndian.PutUint32(buf[len(buf)-12:], uint32(i))
		binary.BigEndian.PutUint64(buf[len(buf)-8:], uint64(time.Now().UnixNano()))
		_ = h.Send(id, buf)
	}
}

// rtGoodPort is where the compliant channel's messages go.
const rtGoodPort = 7801

// rtChanSpec is each process's channel: 1000 B every 10 ms within 20 ms,
// up to 4 messages queued at once (a sender on this shared machine may
// not run for a few periods: the queue, not the network, would drop).
func rtChanSpec(name string) rtchan.Spec {
	return rtchan.Spec{Name: name, Mmax: 1000, Imin: 10 * time.Millisecond, Bmax: 4, Delay: 20 * time.Millisecond}
}

// TestRTChannelsContained: two processes hold real-time channels on a 10
// Mbit/s link flooded by best-effort UDP at twice its rate. This process
// holds two: "good", compliant, and "bad", whose socket it writes on as
// fast as the socket takes it, far beyond what the channel declared; the
// other process holds "steady", compliant. Every message of both
// compliant channels arrives within its local delay bound (by the
// receiver's kernel timestamps): the misbehaving channel queues in a leaf
// of its own and takes neither the other process's share nor that of
// its own process's other channel.
func TestRTChannelsContained(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	const (
		floodPort = 7802
		bulkPort  = 7803
	)
	_, stopFlood := e.resvSink(floodPort)
	defer stopFlood()
	_, stopBulk := e.resvSink(bulkPort)
	defer stopBulk()

	// The other process, with its compliant channel.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	steady := e.client.Command(self)
	steady.Env = append(os.Environ(), attackerEnv+"=rtchan-steady", "HQ_IT_SOCKET="+e.d.Socket, "HQ_IT_LINK="+e.iface(),
		fmt.Sprintf("HQ_IT_DEST=%s:%d", serverV4.Addr(), rtSteadyPort))
	out, err := steady.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	steady.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := steady.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-steady.Process.Pid, syscall.SIGKILL); _ = steady.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "READY") {
		t.Fatalf("the other process: %q", line)
	}

	// Best effort at twice the link's rate.
	bulk := e.clientUDP(bulkPort)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unix.Close(bulk)
		msg := make([]byte, 1000)
		for next := time.Now(); ; next = next.Add(time.Millisecond) {
			select {
			case <-stop:
				return
			default:
			}
			for i := 0; i < 2; i++ { // 2 × 8000 bits per ms: 16 Mbit/s
				_, _ = unix.Write(bulk, msg)
			}
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// This process: a compliant channel and a misbehaving one.
	var conn *net.UDPConn
	if err := e.client.Do(func() (err error) { conn, err = net.ListenUDP("udp4", nil); return err }); err != nil {
		t.Fatal(err)
	}
	h, err := rtchan.NewUDPHost(conn, rtchan.UDPParams(10_000_000), rtchan.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	h.UseDaemon(e.d.Socket, e.iface())
	id, err := h.Create(fmt.Sprintf("%s:%d", serverV4.Addr(), rtGoodPort), rtChanSpec("good"))
	if err != nil {
		t.Fatalf("the compliant channel: %v", err)
	}
	if _, err := h.Create(fmt.Sprintf("%s:%d", serverV4.Addr(), floodPort), rtChanSpec("bad")); err != nil {
		t.Fatalf("the misbehaving channel: %v", err)
	}
	var chans []struct {
		ID    uint64        `json:"id"`
		Name  string        `json:"name"`
		Bound time.Duration `json:"bound_ns"`
	}
	e.hostqosJSON(&chans, "rtchan", "list")
	bounds := map[string]time.Duration{}
	var badID uint64
	for _, c := range chans {
		bounds[c.Name] = c.Bound
		if c.Name == "bad" {
			badID = c.ID
		}
	}
	if len(chans) != 3 || bounds["good"] <= 0 || bounds["steady"] <= 0 || badID == 0 {
		t.Fatalf("channels %+v: want the two processes' three channels", chans)
	}
	// The misbehaving channel: a socket of this process bound to the
	// channels' class naming "bad", written as fast as it takes.
	var bad *net.UDPConn
	if err := e.client.Do(func() (err error) { bad, err = net.ListenUDP("udp4", nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	raw, err := bad.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var aerr error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := raw.Control(func(fd uintptr) {
		_, aerr = api.NewClient(e.d.Socket).QSockets().Attach(ctx, int(fd), api.QSockParams{Class: rtchan.DaemonClass, RTChannel: badID})
	}); err != nil || aerr != nil {
		t.Fatalf("bind the misbehaving channel's socket: %v %v", err, aerr)
	}
	to := &net.UDPAddr{IP: serverV4.Addr().AsSlice(), Port: floodPort}
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg := make([]byte, 1000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = bad.WriteToUDP(msg, to)
		}
	}()
	time.Sleep(500 * time.Millisecond) // the flood and the bulk fill their queues

	measured(t, "two processes' compliant channels beside a misbehaving one", func(int) (bool, string) {
		return rtContainedAttempt(t, e, h, id, bounds["good"], bounds["steady"])
	})
}

// rtSteadyPort is where the other process's compliant channel sends.
const rtSteadyPort = 7804

// rtArrival is a compliant message's delay, by its sequence number.
type rtArrival map[uint32]time.Duration

// rtReceive reads the datagrams arriving on port (of the server) until
// its socket is closed, recording each one's delay from the send time it
// carries to its kernel arrival time.
func rtReceive(t *testing.T, e *env, port int) (got rtArrival, stop func()) {
	var rfd int
	resvDo(t, e.server.Do, func() (err error) {
		if rfd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		_ = unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		_ = unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		return unix.Bind(rfd, &unix.SockaddrInet4{Port: port, Addr: serverV4.Addr().As4()})
	})
	_ = unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	got = rtArrival{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 2048), make([]byte, 128)
		for {
			n, oobn, _, _, err := unix.Recvmsg(rfd, buf, oob, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			at := time.Now()
			if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range cms {
					if m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
						at = time.Unix(int64(binary.NativeEndian.Uint64(m.Data[0:8])), int64(binary.NativeEndian.Uint64(m.Data[8:16])))
					}
				}
			}
			if n < 12 {
				continue
			}
			tail := buf[n-12 : n]
			seq, sent := binary.BigEndian.Uint32(tail[:4]), int64(binary.BigEndian.Uint64(tail[4:]))
			got[seq] = at.Sub(time.Unix(0, sent))
		}
	}()
	return got, func() { unix.Close(rfd); <-done } // the reader's next receive fails
}

// lateness is how many of got came after bound, and the worst delay.
func (got rtArrival) lateness(bound time.Duration) (late int, worst time.Duration) {
	for _, d := range got {
		worst = max(worst, d)
		if d > bound {
			late++
		}
	}
	return late, worst.Round(10 * time.Microsecond)
}

// rtContainedAttempt sends the compliant channel's messages once, watches
// the other process's for as long, and checks they all arrived within
// their bounds.
func rtContainedAttempt(t *testing.T, e *env, h *rtchan.UDPHost, id rtchan.ChannelID, bound, steadyBound time.Duration) (bool, string) {
	const msgs = 300
	got, stopGood := rtReceive(t, e, rtGoodPort)
	other, stopOther := rtReceive(t, e, rtSteadyPort)
	dropped := 0
	var last time.Time
	for i := 0; i < msgs; i++ {
		// At least 12 ms after the previous one, never sooner even when a
		// sleep overran: within the 10 ms declared, so the library never
		// holds a message to its logical arrival time and the time it
		// carries is that arrival.
		time.Sleep(time.Until(last.Add(12 * time.Millisecond)))
		last = time.Now()
		// A buffer per message: Send does not copy it, and a message
		// held to its logical arrival time would otherwise leave with
		// the next one's number.
		buf := make([]byte, 1000)
		binary.BigEndian.PutUint32(buf[len(buf)-12:], uint32(i))
		binary.BigEndian.PutUint64(buf[len(buf)-8:], uint64(time.Now().UnixNano()))
		if err := h.Send(id, buf); errors.Is(err, rtchan.ErrQueueFull) {
			// The library's own queue: its dispatcher did not run for
			// Bmax periods (this machine is shared), not the network.
			dropped++
		} else if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	time.Sleep(time.Second) // the last messages' way
	stopGood()
	stopOther()
	late, worst := got.lateness(bound)
	var missing []uint32
	for i := uint32(0); i < msgs && len(missing) < 10; i++ {
		if _, ok := got[i]; !ok {
			missing = append(missing, i)
		}
	}
	// The other process's messages: those between the first and the last
	// seen, all of them (its library may drop one it could not send in
	// time, as ours: counted apart, at most a tenth).
	lo, hi := uint32(1<<32-1), uint32(0)
	for s := range other {
		lo, hi = min(lo, s), max(hi, s)
	}
	otherLate, otherWorst := other.lateness(steadyBound)
	otherMissing := 0
	if len(other) > 0 {
		otherMissing = int(hi-lo+1) - len(other)
	}
	msg := fmt.Sprintf("good: %d of %d sent arrived (%d dropped by the sending library's queue, missing %v), %d after the %v bound, worst %v; "+
		"steady (the other process): %d arrived, %d missing, %d after the %v bound, worst %v",
		len(got), msgs-dropped, dropped, missing, late, bound, worst, len(other), otherMissing, otherLate, steadyBound, otherWorst)
	t.Log(msg)
	return len(got) == msgs-dropped && late == 0 && dropped <= msgs/10 &&
		len(other) >= msgs/2 && otherLate == 0 && otherMissing <= msgs/10, msg + "; want all, on time"
}
