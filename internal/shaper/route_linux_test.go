package shaper

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRouteIfindex: the route toward the peer of a veth (IPv4 and IPv6)
// leaves through that veth; an address no route covers is an error that
// names it.
func TestRouteIfindex(t *testing.T) {
	p := testutil.NewPair(t)
	p.A.MustDo(t, func() error {
		for _, dst := range []netip.Addr{testutil.PairB4.Addr(), testutil.PairB6.Addr()} {
			got, err := RouteIfindex(dst)
			if err != nil {
				return err
			}
			if got != p.IndexA {
				return fmt.Errorf("route to %s leaves through ifindex %d, want %d (the veth)", dst, got, p.IndexA)
			}
		}
		nowhere := netip.MustParseAddr("203.0.113.9") // no default route in the namespace
		if got, err := RouteIfindex(nowhere); err == nil || !strings.Contains(err.Error(), nowhere.String()) {
			return fmt.Errorf("route to %s: ifindex %d, error %v; want an error naming it", nowhere, got, err)
		}
		return nil
	})
}
