package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// lookupFunc finds a network interface by name. gone is true only when the
// kernel says so positively (ENODEV); any other failure — out of file
// descriptors, a netlink or ioctl error — comes back as err and proves
// nothing about the interface.
type lookupFunc func(name string) (ifindex int, gone bool, err error)

// lookupLink asks the kernel for the ifindex of name (SIOCGIFINDEX in the
// daemon's network namespace). Unlike net.InterfaceByName, whose every
// failure looks alike, it tells "no such interface" from "could not ask".
func lookupLink(name string) (int, bool, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, true, nil // longer than IFNAMSIZ: no interface can have it
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, fmt.Errorf("look up interface %s: open socket: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("look up interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), false, nil
}

// linkVerdict is what a lookup of a managed link means for the daemon.
type linkVerdict int

const (
	linkPresent linkVerdict = iota // exists with ifindex
	linkGone                       // positively does not exist
	linkUnknown                    // the lookup failed: keep what is set up
)

// judgeLink looks name up and decides. An unknown answer for a link that is
// set up now keeps it (same ifindex): enforcement is never torn down on an
// error that is not proof that the interface is gone. The error of an
// unknown answer is logged once until it changes.
func (d *Daemon) judgeLink(name string) (linkVerdict, int) {
	lookup := d.lookup
	if lookup == nil {
		lookup = lookupLink
	}
	ifindex, gone, err := lookup(name)
	if err != nil {
		if d.lookupErr == nil {
			d.lookupErr = map[string]string{}
		}
		if d.lookupErr[name] != err.Error() {
			d.log.Warn("cannot tell whether a managed interface exists; keeping it as it is set up", "link", name, "err", err)
			d.lookupErr[name] = err.Error()
		}
		return linkUnknown, d.links[name]
	}
	if _, ok := d.lookupErr[name]; ok {
		delete(d.lookupErr, name)
		d.log.Info("managed interface can be looked up again", "link", name, "gone", gone)
	}
	if gone {
		return linkGone, 0
	}
	return linkPresent, ifindex
}
