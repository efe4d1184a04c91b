package shaper

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TCPPath is one TCP connection's view of its path, from the kernel's
// TCP_INFO (read for all connections at once through sock_diag): the
// signals of the link-rate estimator (internal/autorate).
type TCPPath struct {
	Remote       netip.Addr
	Cookie       uint64
	RTT, MinRTT  time.Duration
	DeliveryRate uint64 // bytes/s, the kernel's delivery rate estimate
	AppLimited   bool   // the rate sample was limited by the application
	BytesAcked   uint64
	Retrans      uint32 // total retransmissions
	// Receive side: the receiver's round-trip estimate (0: none yet) and
	// the bytes received.
	RcvRTT        time.Duration
	BytesReceived uint64
}

// TCPPaths reads the established TCP connections of the calling thread's
// network namespace, IPv4 and IPv6, at most limit of them.
func TCPPaths(limit int) ([]TCPPath, error) {
	var out []TCPPath
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		rs, err := netlink.SocketDiagTCPInfo(fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, fmt.Errorf("read TCP connections (sock_diag): %w", err)
		}
		for _, r := range rs {
			if len(out) >= limit {
				return out, nil
			}
			if r == nil || r.InetDiagMsg == nil || r.TCPInfo == nil || r.InetDiagMsg.State != unix.BPF_TCP_ESTABLISHED {
				continue
			}
			ti, id := r.TCPInfo, r.InetDiagMsg.ID
			dst, ok := netip.AddrFromSlice(id.Destination)
			if !ok {
				continue
			}
			out = append(out, TCPPath{
				Remote: dst.Unmap(), Cookie: uint64(id.Cookie[1])<<32 | uint64(id.Cookie[0]),
				RTT: time.Duration(ti.Rtt) * time.Microsecond, MinRTT: time.Duration(ti.Min_rtt) * time.Microsecond,
				DeliveryRate: ti.Delivery_rate, AppLimited: ti.Delivery_rate_app_limited != 0,
				BytesAcked: ti.Bytes_acked, Retrans: ti.Total_retrans,
				RcvRTT: time.Duration(ti.Rcv_rtt) * time.Microsecond, BytesReceived: ti.Bytes_received,
			})
		}
	}
	return out, nil
}

// LinkTxBytes is the bytes interface ifindex has sent (its statistics).
func LinkTxBytes(ifindex int) (uint64, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, fmt.Errorf("read statistics of interface %d: %w", ifindex, err)
	}
	if st := l.Attrs().Statistics; st != nil {
		return st.TxBytes, nil
	}
	return 0, fmt.Errorf("read statistics of interface %d: none reported", ifindex)
}
