package engine

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/store"
	"github.com/hostqos/hostqos/internal/units"
)

// Kubernetes pods (docs/kubernetes.md). The node agent (internal/kube)
// hands SetPods the QoS every pod on the node asks for; each pod is
// admitted whole or refused whole (its previous settings, if it had
// admitted ones, stay), and the admitted ones are one more input of the
// derive: a rule per pod, "k8s/NAMESPACE/NAME", that selects the pod's
// containers by their pod UID. Their guarantees count in each link's one
// budget. They are a section of the persistent state file, so a restart
// with the API server unreachable enforces the last known.

// Pod is the QoS a pod asks for: its NAMESPACE/NAME, UID and settings.
type Pod = store.Pod

// PodPolicy is a pod as the node agent reads it.
type PodPolicy struct {
	Pod
	// Err: the agent could not read the pod's settings (an annotation
	// whose value is not a rate or a DSCP). The pod is refused with it
	// and keeps what it had.
	Err error
}

// PodSource is the source of the pods' rules (rule list) and of their
// refusals.
const PodSource = "kubernetes"

// MaxPods bounds the pods with QoS on one node (kubelet runs 110 by
// default; a large node a few hundred).
const MaxPods = 1024

// Longest namespace and name Kubernetes allows (a DNS label, a DNS
// subdomain), and a UID's length.
const (
	maxPodNamespace = 63
	maxPodName      = 253
	podUIDLen       = 36
	maxPodFlow      = 300 // a policy's name and the flow's index
)

// SetPods makes pods the Kubernetes pods of the node and applies what
// that changes. Every pod is admitted or refused alone, in the order of
// its NAMESPACE/NAME, after the pods admitted before keep their share
// (a new or grown guarantee cannot push out one admitted earlier): a
// refused pod (invalid settings, or a guarantee that does not fit a
// link's budget) keeps the settings it had, or gets none; the others
// apply. refused names the refused pods' NAMESPACE/NAME with why. err is
// an error of the apply itself (nothing changed; the agent tries again).
func (e *Engine) SetPods(pods []PodPolicy) (refused map[string]error, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil {
		return nil, errNotLoaded
	}
	want := make(map[string]PodPolicy, len(pods))
	refused = map[string]error{}
	for _, p := range pods {
		k := p.Key()
		if _, dup := want[k]; dup {
			refused[k] = podError(p.Pod, "", "", "listed twice", "")
			continue
		}
		want[k] = p
	}
	next := make(map[string]*store.Pod, len(want))
	for k, cur := range e.pods {
		if w, ok := want[k]; ok && w.UID == cur.UID {
			next[k] = cur
		}
	}
	b := e.newPodBudget(e.eff.Policy)
	// A pod's entries (its rule and those of its policies' flows) are
	// admitted together: one refused, the pod keeps what it had, all of
	// it.
	groups := map[string][]string{}
	for k, w := range want {
		groups[w.PodKey()] = append(groups[w.PodKey()], k)
	}
	pks := make([]string, 0, len(groups))
	for pk := range groups {
		pks = append(pks, pk)
		sort.Strings(groups[pk])
	}
	sort.Strings(pks)
	for _, pk := range pks {
		keys := groups[pk]
		if err := e.admitPodGroup(b, keys, want, next); err != nil {
			for _, k := range keys {
				refused[k] = err
			}
			// What the pod had stays, all of it.
			for k := range next {
				if next[k].PodKey() == pk {
					delete(next, k)
				}
			}
			for k, cur := range e.pods {
				if cur.PodKey() == pk && cur.UID == want[keys[0]].UID && (len(next) < MaxPods) {
					next[k] = cur
				}
			}
		}
	}
	if !maps.EqualFunc(next, e.pods, func(a, b *store.Pod) bool { return *a == *b }) {
		before := e.pods
		err = e.syncLocked("pods", syncChange{pods: &next, save: func(slots *store.Slots) error {
			st := e.stPersist.Holds()
			st.Slots, st.Pods = slots, next
			_, err := e.stPersist.Write(st)
			return err
		}})
		if err != nil {
			return nil, err
		}
		e.publishPodsLocked(before, next)
	}
	e.publishRefusalsLocked(refused)
	return refused, nil
}

// admitPodGroup admits the entries keys of one pod into next, or none of
// them (next is then as it was).
func (e *Engine) admitPodGroup(b *podBudget, keys []string, want map[string]PodPolicy, next map[string]*store.Pod) error {
	added := map[string]*store.Pod{}
	var err error
	for _, k := range keys {
		w := want[k]
		if w.Err != nil {
			err = w.Err
			break
		}
		if cur, ok := next[k]; ok && *cur == w.Pod {
			continue
		}
		if _, ok := next[k]; !ok && len(next) >= MaxPods {
			err = &TooManyError{Why: fmt.Sprintf("pod %s: this node enforces QoS for at most %d pods and flows of pods", k, MaxPods)}
			break
		}
		if err = b.admit(&w.Pod, next); err != nil {
			break
		}
		if cur, ok := next[k]; ok {
			added[k] = cur
		} else {
			added[k] = nil
		}
		p := w.Pod
		next[k] = &p
	}
	if err == nil {
		return nil
	}
	for k, prev := range added {
		if prev == nil {
			delete(next, k)
		} else {
			next[k] = prev
		}
	}
	return err
}

// Events of the pods (docs/events.md): applied (new or changed settings in
// force), removed, and refused (once per pod and reason).
const (
	EventPodApplied = "pod.applied"
	EventPodRefused = "pod.refused"
	EventPodRemoved = "pod.removed"
)

// publishPodsLocked publishes what changed from before to after.
func (e *Engine) publishPodsLocked(before, after map[string]*store.Pod) {
	for _, k := range store.SortedKeys(after) {
		if b, ok := before[k]; !ok || *b != *after[k] {
			e.publish(api.Event{Kind: EventPodApplied, Subject: "pod/" + k, Message: "pod " + k + ": " + describePod(after[k])})
		}
	}
	for _, k := range store.SortedKeys(before) {
		if _, ok := after[k]; !ok {
			e.publish(api.Event{Kind: EventPodRemoved, Subject: "pod/" + k, Message: "pod " + k + ": its QoS no longer applies"})
		}
	}
}

// publishRefusalsLocked publishes the refusals whose reason is new, and
// forgets those of pods no longer refused.
func (e *Engine) publishRefusalsLocked(refused map[string]error) {
	now := make(map[string]string, len(refused))
	for _, k := range store.SortedKeys(refused) {
		msg := refused[k].Error()
		now[k] = msg
		if e.podRefused[k] != msg {
			e.publish(api.Event{Kind: EventPodRefused, Subject: "pod/" + k, Message: msg})
		}
	}
	e.podRefused = now
}

// describePod names a pod's settings, for events.
func describePod(p *store.Pod) string {
	var parts []string
	if p.Class != "" {
		parts = append(parts, "class "+p.Class)
	}
	if p.DSCP != policy.NoDSCP {
		parts = append(parts, "dscp "+p.DSCP.String())
	}
	for _, f := range []struct {
		name string
		r    policy.Rate
	}{{"minbw", p.MinBW}, {"maxbw", p.MaxBW}, {"maxbw_in", p.MaxBWIn}} {
		if f.r > 0 {
			parts = append(parts, f.name+" "+f.r.String())
		}
	}
	if len(parts) == 0 {
		return "no settings (the class default)"
	}
	return strings.Join(parts, ", ")
}

// Pods are the admitted pods, by NAMESPACE/NAME.
func (e *Engine) Pods() map[string]Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Pod, len(e.pods))
	for k, p := range e.pods {
		out[k] = *p
	}
	return out
}

// readmitPods admits the pods the state file held against the policy read
// at New (the config file may have changed since): those that no longer
// fit are dropped, logged, until the agent says more.
func (e *Engine) readmitPods(saved map[string]*store.Pod) map[string]*store.Pod {
	if len(saved) == 0 {
		return nil
	}
	b := e.newPodBudget(e.eff.Policy)
	out := map[string]*store.Pod{}
	for _, k := range store.SortedKeys(saved) {
		p := saved[k]
		if p == nil || p.Key() != k {
			continue
		}
		if err := b.admit(p, out); err != nil {
			e.log.Warn("a Kubernetes pod's saved QoS no longer fits; it applies when the agent hears of the pod again, if then", "pod", k, "err", err)
			continue
		}
		out[k] = p
	}
	return out
}

// podRule is the rule a pod becomes (derive.PodKey).
func podRule(p *store.Pod) policy.Rule {
	r := policy.NewRule(derive.PodPrefix + p.Key())
	r.Class, r.DSCP = p.Class, p.DSCP
	r.Proto, r.Remote, r.RPort = p.Proto, p.Remote, p.RPort
	r.MinBW, r.MaxBW, r.MaxBWIn = p.MinBW, p.MaxBW, p.MaxBWIn
	r.Precedence = derive.PodPrecedence
	return r
}

// podInputs are the admitted pods as the derive takes them.
func podInputs(pods map[string]*store.Pod) []derive.Pod {
	if len(pods) == 0 {
		return nil
	}
	out := make([]derive.Pod, 0, len(pods))
	for _, k := range store.SortedKeys(pods) {
		out = append(out, derive.Pod{Rule: podRule(pods[k]), UID: pods[k].UID})
	}
	return out
}

// podContributions are the pods' guarantees, for a link's budget.
func podContributions(pods map[string]*store.Pod) []policy.Contribution {
	var cs []policy.Contribution
	for _, k := range store.SortedKeys(pods) {
		if p := pods[k]; p.MinBW > 0 {
			cs = append(cs, policy.Contribution{Kind: "pod", Name: k, Rate: p.MinBW})
		}
	}
	return cs
}

// podError is a pod's refusal: a field error of source kubernetes on the
// pod.
func podError(p store.Pod, field, value, reason, fix string) error {
	return &policy.FieldError{Source: PodSource, Object: "pod " + policy.Clip(p.Key()), Field: field, Value: policy.Clip(value), Reason: reason, Fix: fix}
}

// podBudget is what pods are admitted against: the policy, and on every
// shaped link what the policy and the other holders (qsockets, channels)
// hold there, summed once for all the pods of a change.
type podBudget struct {
	p     *policy.Policy
	links []podLink
	apps  int // app-selector slots the policy's rules use
}

type podLink struct {
	l    policy.Link
	held policy.Rate
	cs   []policy.Contribution
}

func (e *Engine) newPodBudget(p *policy.Policy) *podBudget {
	b := &podBudget{p: p}
	admin, user := appSlots(p)
	b.apps = admin + user
	extra := e.holdersWith(policy.Rate(e.qschedRateLocked()), nil)
	for _, l := range p.Links {
		if l.EgressRate == 0 {
			continue
		}
		held, cs := p.HeldOn(l.Name, extra)
		b.links = append(b.links, podLink{l: l, held: held, cs: cs})
	}
	return b
}

// admit checks pod p (new or changed) beside the pods of others (its own
// entry there, if any, is what it replaces): its settings valid for this
// policy, an app-selector slot, its guarantee within every shaped link's
// budget and its class's ceiling.
func (b *podBudget) admit(p *store.Pod, others map[string]*store.Pod) error {
	switch {
	case p.Namespace == "" || len(p.Namespace) > maxPodNamespace || strings.ContainsAny(p.Namespace, "/\x00\n"):
		return podError(*p, "namespace", p.Namespace, "not a Kubernetes namespace", "")
	case p.Name == "" || len(p.Name) > maxPodName || strings.ContainsAny(p.Name, "/\x00\n"):
		return podError(*p, "name", p.Name, "not a Kubernetes pod name", "")
	case len(p.UID) != podUIDLen:
		return podError(*p, "uid", p.UID, "not a pod UID", "")
	case len(p.Flow) > maxPodFlow || strings.ContainsAny(p.Flow, "/\x00\n"):
		return podError(*p, "flow", p.Flow, "not a flow name", "")
	case p.Proto != "" && p.Proto != "tcp" && p.Proto != "udp":
		return podError(*p, "proto", p.Proto, "not a protocol of a pod's flow", "tcp or udp")
	case !p.RPort.IsZero() && p.Proto == "":
		return podError(*p, "rport", p.RPort.String(), "ports need a protocol", "add protocol TCP or UDP")
	}
	r := podRule(p)
	obj := "pod " + p.Key()
	if err := b.p.ValidateRuleProperties(PodSource, obj, r); err != nil {
		return err
	}
	k := p.Key()
	n := 0
	var podsHeld policy.Rate
	var cs []policy.Contribution
	for ko, o := range others {
		if ko == k {
			continue
		}
		n++
		if o.MinBW > 0 {
			podsHeld = units.Add(podsHeld, o.MinBW)
			cs = append(cs, policy.Contribution{Kind: "pod", Name: ko, Rate: o.MinBW})
		}
	}
	if b.apps+n+1 > datapath.MaxAppRules {
		return &TooManyError{Why: fmt.Sprintf("pod %s: the datapath holds at most %d rules that select apps or containers; the node's rules use %d and %d other pods have QoS", k, datapath.MaxAppRules, b.apps, n)}
	}
	if p.MinBW == 0 {
		return nil
	}
	for _, pl := range b.links {
		held := units.Add(pl.held, podsHeld)
		if total := units.Add(held, p.MinBW); total > pl.l.Capacity() {
			holders := "nothing"
			if all := append(append([]policy.Contribution(nil), pl.cs...), cs...); len(all) > 0 {
				holders = policy.FormatContributions(all)
			}
			return podError(*p, "minbw", p.MinBW.String(),
				fmt.Sprintf("the guarantees on node link %s would be %s, over its reservable capacity %s (%g × %s); held now: %s",
					pl.l.Name, total, pl.l.Capacity(), pl.l.ReservableShare(), pl.l.EgressRate, holders),
				"ask for a smaller guarantee, or free one on the node (hostqos link list shows who holds what)")
		}
	}
	cl, ok := b.p.Class(r.EffectiveClass())
	if !ok || cl.MaxBW == 0 {
		return nil
	}
	sum := units.Add(cl.MinBW, p.MinBW)
	for _, ru := range b.p.Rules {
		if ru.MinBW > 0 && ru.EffectiveAction() == policy.ActionPass && ru.EffectiveClass() == cl.Name {
			sum = units.Add(sum, ru.MinBW)
		}
	}
	for ko, o := range others {
		if ko != k && o.MinBW > 0 && podRule(o).EffectiveClass() == cl.Name {
			sum = units.Add(sum, o.MinBW)
		}
	}
	if sum > cl.MaxBW {
		return podError(*p, "minbw", p.MinBW.String(),
			fmt.Sprintf("the guarantees in class %s would be %s, over the class's ceiling maxbw %s", cl.Name, sum, cl.MaxBW),
			"ask for a smaller guarantee or another class")
	}
	return nil
}

// podOfRule is the admitted pod whose rule is name, if any.
func (e *Engine) podOfRuleLocked(name string) (*store.Pod, bool) {
	k, ok := strings.CutPrefix(name, derive.PodPrefix)
	if !ok {
		return nil, false
	}
	p, ok := e.pods[k]
	return p, ok
}

// refusePodRule refuses a local change of a pod's rule: the cluster owns
// it.
func (e *Engine) refusePodRule(name string) error {
	if !strings.HasPrefix(name, derive.PodPrefix) {
		return nil
	}
	e.mu.Lock()
	p, ok := e.podOfRuleLocked(name)
	e.mu.Unlock()
	if !ok {
		return &NotFoundError{What: "rule", Name: name}
	}
	return &BadRequestError{fmt.Errorf("rule %q belongs to the Kubernetes cluster (pod %s); change the pod's annotations (kubernetes.io/egress-bandwidth, hostqos.io/class, …) or the QoSPolicy that selects it instead", policy.Clip(name), policy.Clip(p.Key()))}
}

// podRulesLocked are the admitted pods' rules as the policy's rules are
// listed.
func (e *Engine) podRulesLocked() []policy.Rule {
	out := make([]policy.Rule, 0, len(e.pods))
	for _, k := range store.SortedKeys(e.pods) {
		out = append(out, podRule(e.pods[k]))
	}
	return out
}
