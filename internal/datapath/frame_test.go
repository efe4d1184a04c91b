package datapath

import "github.com/hostqos/hostqos/internal/lab/xdpgen"

// The tests build their frames with the lab's frame builder (tooling, kept
// out of this package); these names keep them short.
type FrameSpec = xdpgen.FrameSpec

func BuildFrame(s FrameSpec) []byte { return xdpgen.BuildFrame(s) }

func IPv4Checksum(hdr []byte) uint16 { return xdpgen.IPv4Checksum(hdr) }
