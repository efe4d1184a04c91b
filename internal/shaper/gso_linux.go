package shaper

import (
	"fmt"
	"log/slog"

	"github.com/vishvananda/netlink"
)

// GSO and HTB. Over a veth or a NIC with segmentation offload, TCP hands the
// qdisc "super-packets" of up to 64 KB that are split into frames only after
// HTB. HTB's round robin sends at least one whole packet per turn, so a
// 64 KB burst (26 ms at 20 Mbit/s) holds up every other class, shares of
// excess bandwidth go per packet instead of per byte, and low rates become
// lumpy. A shaped link therefore gets its GSO size capped to about 1 ms of
// its rate (at least two full frames, at most the 64 KB default), which
// keeps packets no larger than the quanta of typical classes. At 1 Gbit/s
// and above there is no cap. Remove restores the device's default.

const (
	gsoDefault = 65536 // GSO_LEGACY_MAX_SIZE, the kernel's default
	gsoMin     = 2 * frameBytes
)

// GSOCap is the gso_max_size a link shaped at rate (bits/s) gets.
func GSOCap(rate uint64) uint32 {
	c := rate / 8 / 1000 // bytes in 1 ms
	if c < gsoMin {
		c = gsoMin
	}
	if c > gsoDefault {
		c = gsoDefault
	}
	return uint32(c)
}

// setGSO sets the link's GSO size for IPv6 and IPv4 (the kernel applies a
// size up to 64 KB to both) when it differs. Its error does not name the
// link.
func setGSO(log *slog.Logger, h *netlink.Handle, link netlink.Link, size uint32) error {
	if link.Attrs().GSOMaxSize == size {
		return nil
	}
	if err := h.LinkSetGSOMaxSize(link, int(size)); err != nil {
		return fmt.Errorf("set gso_max_size to %d: %w", size, err)
	}
	log.Info("GSO size set", "link", link.Attrs().Name, "gso_max_size", size)
	return nil
}

// defaultGSO is the GSO size a device has when nobody changed it.
func defaultGSO(link netlink.Link) uint32 {
	if t := link.Attrs().TSOMaxSize; t > 0 && t < gsoDefault {
		return t
	}
	return gsoDefault
}
