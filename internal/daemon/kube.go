package daemon

import (
	"context"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/kube"
)

// The Kubernetes node agent (docs/kubernetes.md): with [kubernetes] in the
// config file, the daemon runs internal/kube's agent, which hands the
// engine the QoS of the pods bound to this node.

// kubeAgent is the running agent and how to stop it.
type kubeAgent struct {
	a      *kube.Agent
	cancel context.CancelFunc
	done   chan struct{}
}

// startKube starts the agent when the config file has [kubernetes]. An
// agent that cannot start (no credentials) is logged: the engine keeps
// enforcing the pods it knew. Without [kubernetes] the pods an earlier
// run enforced are dropped: nothing would keep them current.
func (d *Daemon) startKube(ctx context.Context) *kubeAgent {
	set := d.eng.KubernetesSettings()
	if !set.Enabled {
		if n := len(d.eng.Pods()); n > 0 {
			if _, err := d.eng.SetPods(nil); err != nil {
				d.log.Warn("drop the Kubernetes pods an earlier run enforced", "pods", n, "err", err)
			} else {
				d.log.Info("no [kubernetes] in the config file: dropped the Kubernetes pods an earlier run enforced", "pods", n)
			}
		}
		return nil
	}
	a, err := kube.New(kube.Config{Kubeconfig: set.Kubeconfig, NodeName: set.NodeName, UserAgent: "hostqosd/" + Version, Version: Version,
		Logger: d.cfg.Logger.With("component", "kubernetes")}, d.eng)
	if err != nil {
		d.log.Error("the Kubernetes node agent did not start; the pods' last known QoS stays in force", "err", err)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &kubeAgent{a: a, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		a.Run(ctx)
	}()
	d.log.Info("Kubernetes node agent running", "node", a.Node())
	return k
}

func (k *kubeAgent) stop() {
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
}

// status is the agent's part of the daemon's status (nil: no agent).
func (k *kubeAgent) status() *api.KubernetesStatus {
	if k == nil {
		return nil
	}
	st := k.a.Status()
	return &st
}

// The engine takes the cluster's link settings and gives its links.
var (
	_ kube.LinkSetter = (*engine.Engine)(nil)
	_ kube.LinkSource = (*engine.Engine)(nil)
)
