package daemon

import (
	"context"
	"net/http"
	"os"
	"syscall"

	"github.com/hostqos/hostqos/internal/containers"
	"github.com/hostqos/hostqos/internal/derive"
)

// Containers (docs/containers.md): the daemon runs the watcher that finds
// the containers of its network namespace and hands every change to the
// engine, which derives and reconciles what that changes.

// containerWatcher is the running watcher and how to stop it.
type containerWatcher struct {
	w      *containers.Watcher
	cancel context.CancelFunc
	done   chan struct{}
	// preload: verify the container classifiers at start (none found
	// yet, but containers are expected: expectContainers).
	preload bool
}

// openContainers makes the watcher ([containers] of the config file) and
// gives the engine its first scan, before the engine starts: a restart
// with containers running then keeps their rules and veths without a gap.
// nil when [containers] enabled = false or the watcher cannot start
// (logged: containers' traffic is then the host's).
func (d *Daemon) openContainers() *containerWatcher {
	set := d.eng.ContainerSettings()
	if set.Disabled {
		return nil
	}
	w, err := containers.NewWatcher(containers.Config{
		CgroupRoot: d.cgRoot, NetnsNames: set.Netns,
		DockerSocket: set.DockerSocket, PodmanSocket: set.PodmanSocket,
	}, d.cfg.Logger.With("component", "containers"))
	if err != nil {
		d.log.Error("containers are not looked for; their traffic counts as the host's", "err", err)
		return nil
	}
	_, list := w.Snapshot()
	d.eng.SetContainers(toDerive(list))
	preload := d.expectContainers()
	if set.PreloadSet {
		preload = set.Preload
	}
	return &containerWatcher{w: w, done: make(chan struct{}), preload: preload && len(list) == 0}
}

// runtimeDirs are where the container runtimes keep their state: one of
// them on the host says containers may start here.
var runtimeDirs = []string{"/var/lib/docker", "/var/lib/containers/storage", "/run/containerd", "/run/docker.sock"}

// expectContainers says whether containers are likely to start beside
// this daemon: it runs in the host's initial network namespace (that of
// PID 1: where runtimes connect their containers) and a runtime is
// installed. Then the container classifiers are verified in the
// background at start, not when the first container is found (a first
// container would wait a few hundred milliseconds for its rules).
// Daemons in namespaces of their own (tests, per-namespace daemons) leave
// it to the first container.
func (d *Daemon) expectContainers() bool {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/1/ns/net", &st); err != nil {
		return false // not readable (a sandbox): containers are not expected
	}
	return containersExpected(d.netns, st.Ino, runtimeDirs)
}

// containersExpected: a daemon in namespace netns expects containers when
// it is PID 1's (initNetns) and one of a runtime's dirs exists.
func containersExpected(netns, initNetns uint64, dirs []string) bool {
	if netns != initNetns {
		return false
	}
	for _, p := range dirs {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// runContainers keeps the engine's containers current until stopped.
func (d *Daemon) runContainers(ctx context.Context, cw *containerWatcher) {
	ctx, cw.cancel = context.WithCancel(ctx)
	if cw.preload {
		d.mu.Lock()
		dp := d.dp
		d.mu.Unlock()
		go func() {
			if err := dp.PreloadVeth(); err != nil {
				d.log.Warn("verify the container classifiers ahead; the first container found waits for them", "err", err)
			}
		}()
	}
	go func() {
		if err := cw.w.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("the container watcher stopped; containers started from now on are not seen", "err", err)
		}
	}()
	go func() {
		defer close(cw.done)
		var seen uint64
		for {
			select {
			case <-ctx.Done():
				return
			case <-cw.w.Changed():
			}
			gen, list := cw.w.Snapshot()
			if gen == seen {
				continue
			}
			seen = gen
			d.eng.SetContainers(toDerive(list))
		}
	}()
}

func (cw *containerWatcher) stop() {
	if cw == nil || cw.cancel == nil {
		return
	}
	cw.cancel()
	<-cw.done
}

// toDerive is what the derive needs of the containers found.
func toDerive(list []containers.Container) []derive.Container {
	out := make([]derive.Container, 0, len(list))
	for _, c := range list {
		dc := derive.Container{
			Runtime: string(c.Runtime), ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
			Cgroup: c.Cgroup, HostNetwork: c.HostNetwork, NetnsCookie: c.NetnsCookie, PodUID: c.PodUID,
		}
		for _, v := range c.Veths {
			dc.Veths = append(dc.Veths, v.Ifindex)
			dc.VethNames = append(dc.VethNames, v.Name)
		}
		out = append(out, dc)
	}
	return out
}

func (d *Daemon) handleContainers(w http.ResponseWriter, r *http.Request) {
	list, err := d.eng.ContainerList(*callerOf(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}
