package host

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/hostqos/hostqos/internal/datapath/xdp"
)

// Shield is the XDP shield as the engine uses it (engine.ShieldKernel):
// the loaded program with its maps (drop list, protected clients, SYN
// limits, attachments), and the owners of listening sockets, which a
// protected client's port is checked against. The daemon gives it to the
// engine only when the program loaded.
type Shield struct {
	*xdp.Shield // the loaded XDP program and its maps
}

// NewShield is the shield of a loaded XDP program (not nil).
func NewShield(x *xdp.Shield) Shield { return Shield{x} }

// ListenerUIDs reads /proc/self/net/tcp and tcp6 (the daemon's network
// namespace) for the owners of listening sockets on port.
func (Shield) ListenerUIDs(port uint16) ([]uint32, error) {
	var out []uint32
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		uids, err := listenersIn(f, port)
		if err != nil {
			return nil, err
		}
		out = append(out, uids...)
	}
	return out, nil
}

// listenersIn parses one /proc/net/tcp table: "sl local_address
// rem_address st ... uid ..."; state 0A is LISTEN.
func listenersIn(path string, port uint16) ([]uint32, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read listening sockets: %w", err)
	}
	defer f.Close()
	var out []uint32
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || fs[3] != "0A" {
			continue
		}
		_, ph, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		pb, err := hex.DecodeString(ph)
		if err != nil || len(pb) != 2 || uint16(pb[0])<<8|uint16(pb[1]) != port {
			continue
		}
		uid, err := strconv.ParseUint(fs[7], 10, 32)
		if err == nil {
			out = append(out, uint32(uid))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}
