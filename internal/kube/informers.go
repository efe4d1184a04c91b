package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// The custom resources' group version and resources.
var (
	GroupVersion          = schema.GroupVersion{Group: "hostqos.io", Version: "v1alpha1"}
	resQoSPolicy          = GroupVersion.WithResource("qospolicies")
	resClusterQoSPolicy   = GroupVersion.WithResource("clusterqospolicies")
	resHostQoSNode        = GroupVersion.WithResource("hostqosnodes")
	errPoliciesNotServed  = errors.New("the API server does not serve hostqos.io/v1alpha1 (the CRDs in deploy/kubernetes are not installed); enforcing the pods' annotations only, and looking again every 30 s")
	errPoliciesNotListed  = errors.New("the agent cannot list the QoSPolicies and ClusterQoSPolicies (does its ClusterRole grant list and watch? see deploy/kubernetes/rbac.yaml); enforcing the pods' annotations, and the policies once it can list them")
	policiesProbeInterval = 30 * time.Second
	// policyGrace is how long the first sync waits for the policies after
	// the pods, namespaces and node are listed.
	policyGrace = 30 * time.Second
)

// informers are the agent's caches of the cluster: the node's pods, the
// namespaces, its node, and the policies (nil without the CRDs).
type informers struct {
	pods, namespaces, node cache.SharedIndexInformer
	qos, cluster           cache.SharedIndexInformer
}

func (s *informers) all() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{s.pods, s.namespaces, s.node}
	if s.qos != nil {
		out = append(out, s.qos, s.cluster)
	}
	return out
}

func (s *informers) coreSynced() bool {
	return s.pods.HasSynced() && s.namespaces.HasSynced() && s.node.HasSynced()
}

func (s *informers) hasSynced() bool {
	for _, inf := range s.all() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// dropManagedFields is every informer's transform: the agent never reads
// an object's managed fields, most of its bytes.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// newInformers makes the informers; kick is told of every change.
func (a *Agent) newInformers(withPolicies bool, kick func()) *informers {
	mk := func(lw cache.ListerWatcher, obj runtime.Object) cache.SharedIndexInformer {
		inf := cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{})
		_ = inf.SetTransform(dropManagedFields)
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { kick() },
			UpdateFunc: func(any, any) { kick() },
			DeleteFunc: func(any) { kick() },
		})
		return inf
	}
	s := &informers{}
	s.pods = mk(cache.NewFilteredListWatchFromClient(a.core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.node).String()
	}), &corev1.Pod{})
	s.namespaces = mk(cache.NewListWatchFromClient(a.core, "namespaces", metav1.NamespaceAll, fields.Everything()), &corev1.Namespace{})
	s.node = mk(cache.NewListWatchFromClient(a.core, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", a.node)), &corev1.Node{})
	if withPolicies {
		s.qos = mk(dynamicLW(a.dyn.Resource(resQoSPolicy)), &unstructured.Unstructured{})
		s.cluster = mk(dynamicLW(a.dyn.Resource(resClusterQoSPolicy)), &unstructured.Unstructured{})
	}
	return s
}

// dynamicLW lists and watches a custom resource in all namespaces.
func dynamicLW(r dynamic.NamespaceableResourceInterface) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, o)
		},
	}
}

// policiesServed asks the API server whether it serves the CRDs' group.
func (a *Agent) policiesServed(ctx context.Context) (bool, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := a.core.Get().AbsPath("/apis/" + GroupVersion.String()).Do(pctx).Error()
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("ask for %s: %w", GroupVersion, err)
}

// view is what the caches hold now, as Map reads it.
func (a *Agent) view(s *informers) View {
	v := View{Namespaces: map[string]map[string]string{}}
	for _, obj := range s.pods.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			v.Pods = append(v.Pods, pod)
		}
	}
	for _, obj := range s.namespaces.GetStore().List() {
		if ns, ok := obj.(*corev1.Namespace); ok {
			v.Namespaces[ns.Name] = ns.Labels
		}
	}
	for _, obj := range s.node.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok && n.Name == a.node {
			v.Node, v.NodeKnown = n.Labels, true
		}
	}
	if s.qos == nil {
		return v
	}
	seen := map[string]bool{}
	for kind, inf := range map[string]cache.SharedIndexInformer{KindQoSPolicy: s.qos, KindClusterQoSPolicy: s.cluster} {
		for _, obj := range inf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			p := a.readPolicy(kind, u)
			seen[p.UID] = true
			v.Policies = append(v.Policies, p)
		}
	}
	for uid := range a.parsed {
		if !seen[uid] {
			delete(a.parsed, uid)
		}
	}
	return v
}

// parsedPolicy is a policy read from an object of a resource version.
type parsedPolicy struct {
	rv string
	p  *Policy
}

// readPolicy reads a policy object (once per resource version). A spec
// the agent cannot read makes a policy that Map reports invalid.
func (a *Agent) readPolicy(kind string, u *unstructured.Unstructured) *Policy {
	uid := string(u.GetUID())
	if pp, ok := a.parsed[uid]; ok && pp.rv == u.GetResourceVersion() {
		return pp.p
	}
	p := &Policy{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), UID: uid,
		Generation: u.GetGeneration(), Created: u.GetCreationTimestamp().Time}
	if spec, ok := u.Object["spec"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &p.Spec); err != nil {
			// Map reports it: a selector that selects nothing and a rate
			// that is no rate.
			p.Spec = PolicySpec{MinBW: "unreadable spec: " + err.Error()}
		}
	}
	a.parsed[uid] = parsedPolicy{rv: u.GetResourceVersion(), p: p}
	return p
}

// policyObject is the cached object of policy id's kind, namespace and
// name, if any.
func policyObject(s *informers, p *Policy) *unstructured.Unstructured {
	inf := s.qos
	if p.Kind == KindClusterQoSPolicy {
		inf = s.cluster
	}
	if inf == nil {
		return nil
	}
	key := p.Name
	if p.Namespace != "" {
		key = p.Namespace + "/" + p.Name
	}
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}
