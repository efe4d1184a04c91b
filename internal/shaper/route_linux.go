package shaper

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteIfindex is the interface of the kernel's route toward dst, in the
// network namespace of the calling thread: the link a signalled
// reservation toward dst is admitted on (rsvpfront.Options.Route). It
// lives here, hostqos's netlink side, so that the daemon imports no
// netlink.
func RouteIfindex(dst netip.Addr) (int, error) {
	rs, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		return 0, fmt.Errorf("look up route to %s: %w", dst, err)
	}
	if len(rs) == 0 || rs[0].LinkIndex == 0 {
		return 0, fmt.Errorf("look up route to %s: no route", dst)
	}
	return rs[0].LinkIndex, nil
}

// DefaultRouteLinks are the names of the interfaces of the default routes
// (IPv4 and IPv6, main table) in the calling thread's network namespace,
// in the order found, each once.
func DefaultRouteLinks() ([]string, error) {
	var out []string
	seen := map[int]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return out, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() || r.LinkIndex == 0 || seen[r.LinkIndex] {
				continue
			}
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			l, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				continue
			}
			seen[r.LinkIndex] = true
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}
