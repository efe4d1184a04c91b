package datapath

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// tickNS is the length of a jiffy in ns (1e9 / CONFIG_HZ) from the
// running kernel's configuration, 0 when that cannot be found: the
// classifier then reads the clock with a helper call instead of deriving
// it from jiffies.
func tickNS() uint64 {
	hz := kernelHZ()
	if hz <= 0 || 1_000_000_000%hz != 0 {
		return 0
	}
	return uint64(1_000_000_000 / hz)
}

func kernelHZ() int {
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return 0
		}
		r = zr
	} else {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return 0
		}
		f, err := os.Open("/boot/config-" + unix.ByteSliceToString(u.Release[:]))
		if err != nil {
			return 0
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			if err != nil {
				return 0
			}
			return hz
		}
	}
	return 0
}
