package host_test

import (
	"testing"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/host"
)

// The real kernel is everything the engine asks, and its qsocket and
// shield capabilities.
var (
	_ engine.Kernel          = (*host.System)(nil)
	_ engine.QSockKernel     = (*host.System)(nil)
	_ engine.ShieldKernel    = host.Shield{}
	_ engine.ContainerKernel = (*host.System)(nil)
)

// TestLookupLink: the real lookup tells an existing interface from a
// missing one.
func TestLookupLink(t *testing.T) {
	ifindex, gone, err := host.LookupLink("lo")
	if err != nil || gone || ifindex <= 0 {
		t.Errorf("LookupLink(lo) = %d, %v, %v", ifindex, gone, err)
	}
	if _, gone, err := host.LookupLink("hqnosuch0"); err != nil || !gone {
		t.Errorf("LookupLink(hqnosuch0) = gone %v, %v; want gone", gone, err)
	}
}
