package daemon

import (
	"context"
	"net/http"

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
	return &containerWatcher{w: w, done: make(chan struct{})}
}

// runContainers keeps the engine's containers current until stopped.
func (d *Daemon) runContainers(ctx context.Context, cw *containerWatcher) {
	ctx, cw.cancel = context.WithCancel(ctx)
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
