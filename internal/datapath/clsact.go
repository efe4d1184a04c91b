package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// For kernels without TCX (before 6.6) the egress classifier is attached
// as a cls_bpf filter on a clsact qdisc (internal/shaper does the netlink
// part; the kernel adapter, internal/host, picks the path). The datapath
// gives the program for a link and remembers, in its pin directory, on
// which links hostqos added the clsact qdisc itself (a directory per link,
// so that `hostqos down` removes the qdisc only there, and only when it is
// empty).

const clsactMarkPrefix = "clsact_created_"

// EgressProgramFD returns the file descriptor and kernel id of the egress
// classifier variant for the interface (see egressProgram), for attaching
// it outside TCX. The descriptor stays owned by the datapath.
func (d *Datapath) EgressProgramFD(ifindex int) (fd int, id int, err error) {
	p, err := d.egressProgram(ifindex)
	if err != nil {
		return 0, 0, err
	}
	return programFD(p, "egress")
}

// IngressProgramFD is EgressProgramFD for the ingress classifier.
func (d *Datapath) IngressProgramFD(ifindex int) (fd int, id int, err error) {
	p, err := d.ingressProgram(ifindex)
	if err != nil {
		return 0, 0, err
	}
	return programFD(p, "ingress")
}

func programFD(p *ebpf.Program, dir string) (fd int, id int, err error) {
	info, err := p.Info()
	if err != nil {
		return 0, 0, fmt.Errorf("read %s program info: %w", dir, err)
	}
	pid, _ := info.ID()
	return p.FD(), int(pid), nil
}

func clsactMark(dir string, ifindex int) string {
	return filepath.Join(dir, pin.LinksDir, clsactMarkPrefix+strconv.Itoa(ifindex))
}

// MarkClsactCreated records that hostqos added the clsact qdisc of ifindex.
func (d *Datapath) MarkClsactCreated(ifindex int) error {
	if err := os.Mkdir(clsactMark(d.dir, ifindex), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("record clsact of ifindex %d: %w", ifindex, err)
	}
	return nil
}

// ClsactCreated reports whether hostqos added the clsact qdisc of ifindex;
// ForgetClsact drops the record.
func (d *Datapath) ClsactCreated(ifindex int) bool { return ClsactCreatedIn(d.dir, ifindex) }

func (d *Datapath) ForgetClsact(ifindex int) { _ = os.Remove(clsactMark(d.dir, ifindex)) }

// ClsactCreatedIn is ClsactCreated for the pin directory bpffsDir, without
// a loaded datapath (hostqos down).
func ClsactCreatedIn(bpffsDir string, ifindex int) bool {
	_, err := os.Stat(clsactMark(bpffsDir, ifindex))
	return err == nil
}

// ClsactLinks lists the ifindexes hostqos recorded clsact qdiscs for under
// bpffsDir.
func ClsactLinks(bpffsDir string) []int {
	ents, _ := os.ReadDir(filepath.Join(bpffsDir, pin.LinksDir))
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), clsactMarkPrefix)); err == nil && strings.HasPrefix(e.Name(), clsactMarkPrefix) {
			out = append(out, n)
		}
	}
	return out
}

// HaveTCX reports whether the kernel has TCX attachment (Linux 6.6+): a
// query of the loopback interface's TCX egress hook, which changes
// nothing, fails on kernels without it.
func HaveTCX() bool {
	_, err := link.QueryPrograms(link.QueryOptions{Target: 1, Attach: ebpf.AttachTCXEgress})
	return err == nil
}
