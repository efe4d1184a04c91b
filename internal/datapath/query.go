package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// EgressPrograms lists the names of the programs attached to the TCX egress
// hook of an interface in the calling thread's network namespace, whoever
// attached them. Tests and `hostqos status` use it to see what is really in
// the kernel.
func EgressPrograms(ifindex int) ([]string, error) {
	return tcxProgramNames(ifindex, ebpf.AttachTCXEgress, "egress")
}

// IngressPrograms is EgressPrograms for the TCX ingress hook.
func IngressPrograms(ifindex int) ([]string, error) {
	return tcxProgramNames(ifindex, ebpf.AttachTCXIngress, "ingress")
}

func tcxProgramNames(ifindex int, hook ebpf.AttachType, dir string) ([]string, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: hook})
	if err != nil {
		return nil, fmt.Errorf("query TCX %s programs of ifindex %d: %w", dir, ifindex, err)
	}
	var names []string
	for _, p := range res.Programs {
		prog, err := ebpf.NewProgramFromID(p.ID)
		if err != nil {
			continue // detached meanwhile
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			continue
		}
		names = append(names, info.Name)
	}
	return names, nil
}
