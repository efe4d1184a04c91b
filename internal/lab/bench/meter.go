package bench

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
)

// tcpMeter is an in-process TCP receiver in a node: it accepts every
// connection and counts the bytes read (goodput); with discard it closes
// each connection at once and only counts accepts.
type tcpMeter struct {
	ln       net.Listener
	bytes    atomic.Uint64
	accepted atomic.Uint64
	open     atomic.Int64 // connections not yet closed by the peer
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func listenTCP(node *testbed.Node, addr string, discard bool) (*tcpMeter, error) {
	m := &tcpMeter{}
	err := node.Do(func() error {
		ln, err := net.Listen("tcp", addr)
		m.ln = ln
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, node.Name, err)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			c, err := m.ln.Accept()
			if err != nil {
				return
			}
			m.accepted.Add(1)
			if discard {
				c.Close()
				continue
			}
			m.mu.Lock()
			m.conns = append(m.conns, c)
			m.mu.Unlock()
			m.wg.Add(1)
			m.open.Add(1)
			go func() {
				defer m.wg.Done()
				defer m.open.Add(-1)
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					m.bytes.Add(uint64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return m, nil
}

// drained waits until every sender closed its connection (the kernel
// still sends an exited sender's buffered data) or timeout passes.
func (m *tcpMeter) drained(timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	for m.open.Load() > 0 {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func (m *tcpMeter) Close() {
	m.ln.Close()
	m.mu.Lock()
	for _, c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// udpHole binds a UDP socket in a node so that traffic to it is delivered
// (and, when nobody reads, dropped at the socket) instead of answered with
// ICMP port-unreachable. With read, a goroutine reads and counts.
type udpHole struct {
	c       *net.UDPConn
	packets atomic.Uint64
	bytes   atomic.Uint64
	done    chan struct{}
}

func bindUDP(node *testbed.Node, addr string, read bool) (*udpHole, error) {
	h := &udpHole{done: make(chan struct{})}
	err := node.Do(func() error {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return err
		}
		h.c, err = net.ListenUDP("udp", ua)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bind UDP %s in %s: %w", addr, node.Name, err)
	}
	if !read {
		close(h.done)
		return h, nil
	}
	go func() {
		defer close(h.done)
		buf := make([]byte, 65536)
		for {
			n, err := h.c.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			h.packets.Add(1)
			h.bytes.Add(uint64(n))
		}
	}()
	return h, nil
}

func (h *udpHole) Close() {
	h.c.Close()
	<-h.done
}

// series samples a cumulative counter over time.
type series struct {
	mu   sync.Mutex
	t    []time.Time
	v    []uint64
	stop chan struct{}
	done chan struct{}
}

// sample reads get every interval until Stop.
func sample(every time.Duration, get func() (uint64, error)) *series {
	s := &series{stop: make(chan struct{}), done: make(chan struct{})}
	add := func() {
		v, err := get()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.t = append(s.t, time.Now())
		s.v = append(s.v, v)
		s.mu.Unlock()
	}
	add()
	go func() {
		defer close(s.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				add()
			case <-s.stop:
				add()
				return
			}
		}
	}()
	return s
}

func (s *series) Stop() { close(s.stop); <-s.done }

// rate is the counter's growth per second between the first sample at or
// after from and the last sample at or before to; it also returns the
// window actually used.
func (s *series) rate(from, to time.Time) (perSec float64, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i0, i1 := -1, -1
	for i, t := range s.t {
		if i0 < 0 && !t.Before(from) {
			i0 = i
		}
		if !t.After(to) {
			i1 = i
		}
	}
	if i0 < 0 || i1 <= i0 {
		return 0, 0
	}
	window = s.t[i1].Sub(s.t[i0])
	return float64(s.v[i1]-s.v[i0]) / window.Seconds(), window
}
