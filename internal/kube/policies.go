package kube

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// The custom resources (deploy/kubernetes, docs/kubernetes.md): QoSPolicy
// gives the pods of its namespace that its podSelector selects their
// settings; ClusterQoSPolicy does so across the namespaces its
// namespaceSelector selects, on the nodes its nodeSelector selects.
//
// Precedence, field by field (class, dscp, minbw, maxbw, maxbw-in): a
// pod's own annotations, then the QoSPolicies that select it, then the
// ClusterQoSPolicies; among policies of one kind the oldest (creation
// time, then namespace/name) decides. A policy with flow selectors does
// not give the pod's traffic anything: each of its flows (and each port
// range of a flow) becomes a rule of its own with that policy's settings
// alone, evaluated before the pod's rule.

// Kinds of the custom resources.
const (
	KindQoSPolicy        = "QoSPolicy"
	KindClusterQoSPolicy = "ClusterQoSPolicy"
)

// PolicySpec is the spec of a QoSPolicy or a ClusterQoSPolicy (the
// cluster's three selectors and link only in the latter).
type PolicySpec struct {
	PodSelector       *metav1.LabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	NodeSelector      *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	Class             string                `json:"class,omitempty"`
	DSCP              *intstr.IntOrString   `json:"dscp,omitempty"`
	MinBW             string                `json:"minbw,omitempty"`
	MaxBW             string                `json:"maxbw,omitempty"`
	MaxBWIn           string                `json:"maxbwIn,omitempty"`
	Flows             []FlowSpec            `json:"flows,omitempty"`
	Link              *LinkSpec             `json:"link,omitempty"`
}

// FlowSpec selects flows of the pods: a remote range, a protocol, ports.
type FlowSpec struct {
	RemoteCIDR string     `json:"remoteCIDR,omitempty"`
	Protocol   string     `json:"protocol,omitempty"`
	Ports      []PortSpec `json:"ports,omitempty"`
}

// PortSpec is a remote port, or a range up to EndPort.
type PortSpec struct {
	Port    int32  `json:"port"`
	EndPort *int32 `json:"endPort,omitempty"`
}

// LinkSpec is a ClusterQoSPolicy's setting of its nodes' link.
type LinkSpec struct {
	Name        string   `json:"name,omitempty"`
	EgressRate  string   `json:"egressRate,omitempty"`
	IngressRate string   `json:"ingressRate,omitempty"`
	Reservable  *float64 `json:"reservable,omitempty"`
}

// Policy is a QoSPolicy or ClusterQoSPolicy as the agent reads it.
type Policy struct {
	Kind       string
	Namespace  string // "" for a ClusterQoSPolicy
	Name       string
	UID        string
	Generation int64
	Created    time.Time
	Spec       PolicySpec
}

// ID names the policy: "QoSPolicy NAMESPACE/NAME" or "ClusterQoSPolicy
// NAME".
func (p *Policy) ID() string {
	if p.Namespace != "" {
		return p.Kind + " " + p.Namespace + "/" + p.Name
	}
	return p.Kind + " " + p.Name
}

// View is what the agent knows of the cluster: the node's pods, the
// namespaces' labels, its node's labels, the policies.
type View struct {
	Pods []*corev1.Pod
	// Namespaces are the labels of each namespace known.
	Namespaces map[string]map[string]string
	// Node are the node's labels; NodeKnown, whether its object was read.
	Node      map[string]string
	NodeKnown bool
	Policies  []*Policy
}

// Mapping is what a View asks of the engine, and who asked.
type Mapping struct {
	Pods []engine.PodPolicy
	// PodOf is the pod of each entry (by engine key).
	PodOf map[string]*corev1.Pod
	// Sources are who gave each entry its settings, in precedence order
	// ("annotations", a policy's ID).
	Sources map[string][]string
	// Selected are the pods (NAMESPACE/NAME) each policy selects on the
	// node; Entries the entries it gave a setting to; Invalid why a policy
	// gives nothing (a value the agent cannot read). By policy ID.
	Selected map[string][]string
	Entries  map[string][]string
	Invalid  map[string]error
	// Link is the node's link as the oldest ClusterQoSPolicy with a link
	// that selects the node sets it; LinkFrom names that policy.
	Link     *LinkSpec
	LinkFrom string
}

// podFields are the settings a source gives a pod, each given or not.
type podFields struct {
	class               *string
	dscp                *policy.DSCP
	minbw, maxbw, maxIn *policy.Rate
}

// fill gives f the fields of g that f does not have; taken says whether
// it took any.
func (f *podFields) fill(g podFields) (taken bool) {
	take := func(dst **policy.Rate, src *policy.Rate) {
		if *dst == nil && src != nil {
			*dst, taken = src, true
		}
	}
	if f.class == nil && g.class != nil {
		f.class, taken = g.class, true
	}
	if f.dscp == nil && g.dscp != nil {
		f.dscp, taken = g.dscp, true
	}
	take(&f.minbw, g.minbw)
	take(&f.maxbw, g.maxbw)
	take(&f.maxIn, g.maxIn)
	return taken
}

func (f podFields) empty() bool {
	return f.class == nil && f.dscp == nil && f.minbw == nil && f.maxbw == nil && f.maxIn == nil
}

// apply sets p's settings from f.
func (f podFields) apply(p *engine.Pod) {
	p.DSCP = policy.NoDSCP
	if f.class != nil {
		p.Class = *f.class
	}
	if f.dscp != nil {
		p.DSCP = *f.dscp
	}
	if f.minbw != nil {
		p.MinBW = *f.minbw
	}
	if f.maxbw != nil {
		p.MaxBW = *f.maxbw
	}
	if f.maxIn != nil {
		p.MaxBWIn = *f.maxIn
	}
}

// compiled is a policy read: its selectors and settings.
type compiled struct {
	p               *Policy
	pods, ns, nodes labels.Selector // nil: all
	f               podFields
	flows           []flowRule
}

// flowRule is one rule of a policy's flows: its name and selector.
type flowRule struct {
	name   string
	proto  string
	remote netip.Prefix
	rport  policy.PortRange
}

// compile reads policy p; an error names the field.
func compile(p *Policy) (*compiled, error) {
	c := &compiled{p: p}
	sel := func(field string, s *metav1.LabelSelector) (labels.Selector, error) {
		if s == nil {
			return nil, nil
		}
		ls, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", field, err)
		}
		if ls.Empty() {
			return nil, nil
		}
		return ls, nil
	}
	var err error
	if c.pods, err = sel("podSelector", p.Spec.PodSelector); err != nil {
		return nil, err
	}
	if p.Kind == KindClusterQoSPolicy {
		if c.ns, err = sel("namespaceSelector", p.Spec.NamespaceSelector); err != nil {
			return nil, err
		}
		if c.nodes, err = sel("nodeSelector", p.Spec.NodeSelector); err != nil {
			return nil, err
		}
	}
	s := p.Spec
	if s.Class != "" {
		c.f.class = &s.Class
	}
	if s.DSCP != nil {
		d, err := policy.ParseDSCP(s.DSCP.String())
		if err != nil {
			return nil, fmt.Errorf("read dscp %q: %w", policy.Clip(s.DSCP.String()), err)
		}
		c.f.dscp = &d
	}
	for _, r := range []struct {
		field, v string
		into     **policy.Rate
	}{{"minbw", s.MinBW, &c.f.minbw}, {"maxbw", s.MaxBW, &c.f.maxbw}, {"maxbwIn", s.MaxBWIn, &c.f.maxIn}} {
		if r.v == "" {
			continue
		}
		rate, err := parseRate(r.v)
		if err != nil {
			return nil, fmt.Errorf("read %s %q: %w", r.field, policy.Clip(r.v), err)
		}
		*r.into = &rate
	}
	prefix := p.Name
	if p.Kind == KindClusterQoSPolicy {
		prefix = "cluster:" + p.Name
	}
	for i, fl := range s.Flows {
		base := flowRule{name: prefix + ":" + strconv.Itoa(i), proto: strings.ToLower(fl.Protocol)}
		if fl.RemoteCIDR != "" {
			pfx, err := netip.ParsePrefix(fl.RemoteCIDR)
			if err != nil || pfx != pfx.Masked() {
				return nil, fmt.Errorf("read flows[%d].remoteCIDR %q: not an address range without host bits", i, policy.Clip(fl.RemoteCIDR))
			}
			base.remote = pfx
		}
		if base.proto != "" && base.proto != "tcp" && base.proto != "udp" {
			return nil, fmt.Errorf("read flows[%d].protocol %q: TCP or UDP", i, policy.Clip(fl.Protocol))
		}
		if len(fl.Ports) == 0 {
			c.flows = append(c.flows, base)
			continue
		}
		if base.proto == "" {
			return nil, fmt.Errorf("read flows[%d].ports: ports need a protocol", i)
		}
		for j, pt := range fl.Ports {
			end := pt.Port
			if pt.EndPort != nil {
				end = *pt.EndPort
			}
			if pt.Port < 1 || end < pt.Port || end > 65535 {
				return nil, fmt.Errorf("read flows[%d].ports[%d]: %d..%d is not a port range", i, j, pt.Port, end)
			}
			r := base
			if j > 0 {
				r.name += ":" + strconv.Itoa(j)
			}
			r.rport = policy.PortRange{From: uint16(pt.Port), To: uint16(end)}
			c.flows = append(c.flows, r)
		}
	}
	if len(c.flows) > 0 && c.f.empty() {
		return nil, errors.New("flows without a setting: set class, dscp, minbw, maxbw or maxbwIn")
	}
	return c, nil
}

// selects says whether c selects pod (in a namespace with nsLabels, or
// none known) on the node of v.
func (c *compiled) selects(pod *corev1.Pod, v *View) bool {
	if c.p.Kind == KindQoSPolicy && pod.Namespace != c.p.Namespace {
		return false
	}
	if c.pods != nil && !c.pods.Matches(labels.Set(pod.Labels)) {
		return false
	}
	if c.ns != nil {
		nl, ok := v.Namespaces[pod.Namespace]
		if !ok || !c.ns.Matches(labels.Set(nl)) {
			return false
		}
	}
	return c.selectsNode(v)
}

func (c *compiled) selectsNode(v *View) bool {
	return c.nodes == nil || v.NodeKnown && c.nodes.Matches(labels.Set(v.Node))
}

// policyOrder sorts policies: QoSPolicies before ClusterQoSPolicies, each
// kind oldest first, then by namespace/name.
func policyOrder(a, b *Policy) int {
	if a.Kind != b.Kind {
		if a.Kind == KindQoSPolicy {
			return -1
		}
		return 1
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// Map is what v asks of the engine (see the precedence above).
func Map(v View) Mapping {
	m := Mapping{PodOf: map[string]*corev1.Pod{}, Sources: map[string][]string{},
		Selected: map[string][]string{}, Entries: map[string][]string{}, Invalid: map[string]error{}}
	pols := slices.Clone(v.Policies)
	slices.SortFunc(pols, policyOrder)
	var cs []*compiled
	for _, p := range pols {
		c, err := compile(p)
		if err != nil {
			m.Invalid[p.ID()] = err
			continue
		}
		cs = append(cs, c)
		if p.Kind == KindClusterQoSPolicy && p.Spec.Link != nil && m.Link == nil && c.selectsNode(&v) {
			m.Link, m.LinkFrom = p.Spec.Link, p.ID()
		}
	}
	pods := slices.Clone(v.Pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, pod := range pods {
		if !mayRun(pod) {
			continue
		}
		f, found, errs := annotationFields(pod)
		base := engine.PodPolicy{Pod: engine.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}}
		key := base.Key()
		var sources []string
		if found {
			sources = append(sources, "annotations")
		}
		var flows []engine.PodPolicy
		for _, c := range cs {
			if !c.selects(pod, &v) {
				continue
			}
			id := c.p.ID()
			m.Selected[id] = append(m.Selected[id], key)
			if len(c.flows) > 0 {
				for _, fr := range c.flows {
					fp := engine.PodPolicy{Pod: base.Pod}
					c.f.apply(&fp.Pod)
					fp.Flow, fp.Proto, fp.Remote, fp.RPort = fr.name, fr.proto, fr.remote, fr.rport
					flows = append(flows, fp)
					m.Entries[id] = append(m.Entries[id], fp.Key())
					m.Sources[fp.Key()] = []string{id}
				}
				continue
			}
			if f.fill(c.f) {
				sources = append(sources, id)
				m.Entries[id] = append(m.Entries[id], key)
			}
		}
		if len(sources) > 0 {
			f.apply(&base.Pod)
			if len(errs) > 0 {
				base.Err = errs
			}
			m.Pods = append(m.Pods, base)
			m.PodOf[key], m.Sources[key] = pod, sources
		}
		for _, fp := range flows {
			m.Pods = append(m.Pods, fp)
			m.PodOf[fp.Key()] = pod
		}
	}
	return m
}

// mayRun: pod is bound to a node and not finished.
func mayRun(pod *corev1.Pod) bool {
	return pod.UID != "" && pod.Spec.NodeName != "" &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}
