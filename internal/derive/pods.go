package derive

import (
	"fmt"
	"sort"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// Kubernetes pods (docs/kubernetes.md). The node agent tells the engine
// what each pod's annotations ask for; each admitted pod becomes a rule
// (PodKey) that selects the pod's containers by their pod UID, which
// internal/containers reads from the cgroup path kubelet gives them. No
// user can write that selector: it is the rule's attachment, not a field
// of policy.Rule.

// PodPrefix keys a pod's rule: "k8s/NAMESPACE/NAME". No user rule has a
// '/' in its name either.
const PodPrefix = "k8s/"

// PodKey is the key (and the rule name) of pod namespace/name.
func PodKey(namespace, name string) string { return PodPrefix + namespace + "/" + name }

// PodPrecedence is the precedence of a pod's rule: the cluster decides
// for its pods before the node's own rules, except the node's rules of
// the highest precedence (and the reservations and protected clients,
// which are evaluated with them).
const PodPrecedence = policy.MaxPrecedence - 1

// Pod is an admitted pod's rule (named PodKey, with its properties) and
// the pod's UID, which picks its containers.
type Pod struct {
	Rule policy.Rule
	UID  string
}

// pods adds every pod's rule, in the order of their names.
func pods(in *Input, x *Expansion) {
	if len(in.Pods) == 0 {
		return
	}
	list := append([]Pod(nil), in.Pods...)
	sort.Slice(list, func(i, j int) bool { return list[i].Rule.Name < list[j].Rule.Name })
	rs := x.rules()
	for _, p := range list {
		r := p.Rule
		r.Precedence = PodPrecedence
		*rs = append(*rs, r)
		x.attach(r.Name, attachment{pod: p.UID})
	}
}

// resolvePod adds to dr the keys of the containers of pod uid, as
// resolveContainers does for a rule's container selectors. nothing reports
// that none of them runs (or can be told from the host) now.
func resolvePod(res Resolver, dr *datapath.Rule, r policy.Rule, uid string, cs []Container, d *Desired) (nothing bool) {
	var notes []string
	nothing = selectContainers(res, dr, r, cs, d, &notes, func(c Container) bool { return c.PodUID == uid })
	if len(notes) > 0 {
		d.Resolved[r.Name] = notes
	}
	if nothing {
		d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: no container of pod UID %s runs on this node (or hostqosd found none under its kubelet cgroup); the rule matches nothing until one starts", r.Name, uid))
	}
	return nothing
}
