package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/traffic"
)

// HelperCommand is the (hidden) subcommand of the executables that run
// the benchmark's traffic: `<exe> bench-helper SUB [flags]`. The bench
// runs copies of its own executable this way inside testbed namespaces, so
// every app it needs to tell apart has its own executable file.
const HelperCommand = "bench-helper"

// HelperEnv is set in the environment of every helper process; an
// executable (a test binary) may use it to dispatch to Helper early.
const HelperEnv = "HOSTQOS_BENCH_HELPER"

// Helper runs one helper subcommand (args[0]) and writes its JSON result
// to stdout. Subcommands: flood (UDP as fast as possible or paced), tcp
// (bulk TCP), connect (sequential TCP connects), flows (one UDP packet
// from each of many source ports), voice (G.729 calls against an echo).
func Helper(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("bench-helper: no subcommand; use flood, tcp, connect, flows or voice")
	}
	sub, args := args[0], args[1:]
	if sub == "qsock-app" {
		return helperQSockApp(args, stdout)
	}
	fs := flag.NewFlagSet("bench-helper "+sub, flag.ContinueOnError)
	to := fs.String("to", "", "destination host:port")
	size := fs.Int("size", 64, "UDP payload bytes")
	dur := fs.Duration("duration", time.Second, "how long")
	rate := fs.Float64("rate", 0, "flood: IP bit rate (0 = as fast as possible)")
	batch := fs.Int("batch", 64, "flood: datagrams per sendmmsg")
	count := fs.Int("count", 1000, "connect/flows: how many")
	basePort := fs.Int("base-port", 20000, "flows: first source port")
	streams := fs.Int("streams", 1, "tcp: parallel connections")
	calls := fs.Int("calls", 1, "voice: calls")
	cgroup := fs.String("cgroup", "", "cgroup v2 directory to join before opening sockets")
	warmup := fs.Duration("warmup", time.Second, "download: time before goodput is counted")
	every := fs.Duration("sample", 0, "download: also record the bytes read every this often (0 = no samples)")
	pps := fs.Float64("pps", 1000, "cbr: datagrams per second")
	spin := fs.Bool("spin", false, "cbr: busy-wait between datagrams instead of sleeping")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cgroup != "" {
		p := filepath.Join(*cgroup, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("join cgroup %s: %w", *cgroup, err)
		}
	}
	ap, err := netip.ParseAddrPort(*to)
	if err != nil {
		return fmt.Errorf("bench-helper %s --to %q: not host:port: %w", sub, *to, err)
	}
	var res any
	switch sub {
	case "flood":
		res, err = helperFlood(ap, *size, *dur, *rate, *batch)
	case "tcp":
		res, err = helperTCP(ap, *dur, *streams)
	case "connect":
		res, err = helperConnect(ap, *count)
	case "flows":
		res, err = helperFlows(ap, *count, *basePort)
	case "cbr":
		res, err = helperCBR(ap, *size, *dur, *pps, *spin)
	case "flows-active":
		res, err = helperFlowsActive(ap, *count, *basePort, *dur)
	case "download":
		res, err = helperDownload(ap, *dur, *warmup, *every, *streams)
	case "voice":
		res, err = traffic.RunVoice(context.Background(), traffic.VoiceConfig{
			To: ap.String(), Calls: *calls, Mode: traffic.VoiceEcho, Duration: *dur, DSCP: traffic.NoDSCP})
	default:
		return fmt.Errorf("bench-helper: unknown subcommand %q; use flood, cbr, tcp, connect, flows, flows-active, download, voice or qsock-app", sub)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

func sockaddr(ap netip.AddrPort) (int, unix.Sockaddr) {
	if ap.Addr().Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// floodResult is what the flood helper sent.
type floodResult struct {
	Sent      uint64  `json:"sent"`
	Errors    uint64  `json:"errors"`
	DurationS float64 `json:"duration_s"`
}

// helperFlood sends size-byte UDP datagrams to ap with sendmmsg from one
// thread for dur, as fast as it can or paced at rate (bits/s of whole IP
// packets).
func helperFlood(ap netip.AddrPort, size int, dur time.Duration, rate float64, batch int) (*floodResult, error) {
	runtime.LockOSThread()
	fam, sa := sockaddr(ap)
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return nil, fmt.Errorf("connect UDP socket to %v: %w", ap, err)
	}
	batch = max(1, min(batch, 1024))
	buf := make([]byte, size)
	iovs := make([]unix.Iovec, batch)
	msgs := make([]unix.Mmsghdr, batch)
	for i := range msgs {
		iovs[i].Base = &buf[0]
		iovs[i].SetLen(size)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	ipLen := float64(size + 8 + 20)
	if ap.Addr().Is6() {
		ipLen += 20
	}
	var res floodResult
	start := time.Now()
	end := start.Add(dur)
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if rate > 0 {
			// Pace: the next batch leaves when the bytes sent so far
			// are due.
			due := start.Add(time.Duration(float64(res.Sent) * ipLen * 8 / rate * 1e9))
			if d := due.Sub(now); d > 0 {
				time.Sleep(d)
				continue
			}
		}
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(batch), 0, 0, 0)
		if errno != 0 {
			res.Errors++
			continue
		}
		res.Sent += uint64(n)
	}
	res.DurationS = time.Since(start).Seconds()
	return &res, nil
}

// tcpResult is what the tcp helper wrote.
type tcpResult struct {
	Bytes     uint64  `json:"bytes"`
	DurationS float64 `json:"duration_s"`
}

func helperTCP(ap netip.AddrPort, dur time.Duration, streams int) (*tcpResult, error) {
	var total atomic.Uint64
	var wg sync.WaitGroup
	errc := make(chan error, streams)
	start := time.Now()
	deadline := start.Add(dur)
	for i := 0; i < max(1, streams); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", ap.String(), 5*time.Second)
			if err != nil {
				errc <- fmt.Errorf("connect to %v: %w", ap, err)
				return
			}
			// At the end, abort (RST) instead of leaving the kernel to
			// send what the socket still buffers: the next measurement
			// must start on an idle link.
			defer c.Close()
			if tc, ok := c.(*net.TCPConn); ok {
				defer tc.SetLinger(0)
			}
			_ = c.SetWriteDeadline(deadline)
			buf := make([]byte, 128<<10)
			for time.Now().Before(deadline) {
				n, err := c.Write(buf)
				total.Add(uint64(n))
				if err != nil {
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return &tcpResult{Bytes: total.Load(), DurationS: time.Since(start).Seconds()}, nil
}

// connectResult holds every connect's latency (socket() through connect()
// returning) in microseconds.
type connectResult struct {
	OK        int       `json:"ok"`
	Failed    int       `json:"failed"`
	FirstErr  string    `json:"first_error,omitempty"`
	LatencyUS []float64 `json:"latency_us"`
}

func helperConnect(ap netip.AddrPort, count int) (*connectResult, error) {
	runtime.LockOSThread()
	fam, sa := sockaddr(ap)
	res := &connectResult{LatencyUS: make([]float64, 0, count)}
	for i := 0; i < count; i++ {
		t0 := time.Now()
		fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open TCP socket: %w", err)
		}
		err = unix.Connect(fd, sa)
		d := time.Since(t0)
		unix.Close(fd)
		if err != nil {
			res.Failed++
			if res.FirstErr == "" {
				res.FirstErr = err.Error()
			}
			continue
		}
		res.OK++
		res.LatencyUS = append(res.LatencyUS, float64(d.Nanoseconds())/1e3)
	}
	return res, nil
}

// flowsResult is how many distinct flows the flows helper started.
type flowsResult struct {
	Sent   int `json:"sent"`
	Failed int `json:"failed"`
}

// helperFlows sends one datagram from each of count source ports
// (basePort, basePort+1, ...): count distinct UDP flows.
func helperFlows(ap netip.AddrPort, count, basePort int) (*flowsResult, error) {
	fam, sa := sockaddr(ap)
	res := &flowsResult{}
	msg := []byte("hostqos-bench")
	for i := 0; i < count; i++ {
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open UDP socket: %w", err)
		}
		port := basePort + i%(65535-basePort)
		var local unix.Sockaddr = &unix.SockaddrInet4{Port: port}
		if fam == unix.AF_INET6 {
			local = &unix.SockaddrInet6{Port: port}
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, local); err != nil {
			res.Failed++
			unix.Close(fd)
			continue
		}
		if err := unix.Sendto(fd, msg, 0, sa); err != nil {
			res.Failed++
		} else {
			res.Sent++
		}
		unix.Close(fd)
	}
	return res, nil
}

// helperFlowsActive keeps count UDP flows active for dur: one socket bound
// to each source port from basePort, each sending a datagram to ap every
// second, paced evenly over the second.
func helperFlowsActive(ap netip.AddrPort, count, basePort int, dur time.Duration) (*flowsResult, error) {
	fam, sa := sockaddr(ap)
	res := &flowsResult{}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := 0; i < count; i++ {
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open UDP socket %d: %w", i, err)
		}
		port := basePort + i%(65535-basePort)
		var local unix.Sockaddr = &unix.SockaddrInet4{Port: port}
		if fam == unix.AF_INET6 {
			local = &unix.SockaddrInet6{Port: port}
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, local); err != nil {
			res.Failed++
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
	}
	msg := []byte("hostqos-bench")
	end := time.Now().Add(dur)
	const slices = 50 // per second
	for sec := time.Now(); time.Now().Before(end); sec = sec.Add(time.Second) {
		for s := 0; s < slices; s++ {
			for i := s; i < len(fds); i += slices {
				if err := unix.Sendto(fds[i], msg, 0, sa); err != nil {
					res.Failed++
				} else {
					res.Sent++
				}
			}
			time.Sleep(time.Until(sec.Add(time.Duration(s+1) * time.Second / slices)))
		}
	}
	return res, nil
}
