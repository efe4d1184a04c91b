package shaper

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
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
