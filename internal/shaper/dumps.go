package shaper

import "sync/atomic"

// dumps counts the netlink dumps (qdisc, class and filter lists) this
// process asked the kernel for; Dumps reads it. An idle daemon asks for
// none: the count is how a test and a benchmark see that.
var dumps atomic.Uint64

// Dumps is the number of netlink dumps the shaper made since the process
// started.
func Dumps() uint64 { return dumps.Load() }
