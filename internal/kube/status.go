package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/hostqos/hostqos/api"
)

// Status back to the cluster (docs/kubernetes.md). Each node writes its
// own entry of a policy's status.nodes (server-side apply of the status
// subresource, field manager hostqos-NODE): an Admitted condition, True,
// or False with the refusals' numbers. It writes an entry only for the
// policies that select one of its pods, are invalid, or set its link, and
// takes its entry away when that ends. Its HostQoSNode (named after the
// node) has the links' capacity and admitted guarantees.
//
// Writes go through one queue: at most one pending write per object (a
// newer one replaces it), at most maxPendingWrites objects, writeQPS a
// second after a burst of writeBurst; an entry that already says what the
// node would write is not written again.

const (
	writeQPS         = 5
	writeBurst       = 20
	maxPendingWrites = 2048
	// nodeStatusEvery is how often the HostQoSNode's lastSync is
	// refreshed when nothing else of it changed.
	nodeStatusEvery = time.Minute
	// maxConditionRefusals are the refusals a condition's message names
	// (then how many more).
	maxConditionRefusals = 3
	conditionAdmitted    = "Admitted"
)

// writeQueue holds the pending writes, one per object.
type writeQueue struct {
	mu      sync.Mutex
	pending map[string]pendingWrite
	order   []string
	wake    chan struct{}
	limit   flowcontrol.RateLimiter
	// written are the digests of the last successful write per object.
	written map[string]string
}

type pendingWrite struct {
	digest string
	do     func(context.Context) error
}

func newWriteQueue() *writeQueue {
	return &writeQueue{pending: map[string]pendingWrite{}, wake: make(chan struct{}, 1),
		limit: flowcontrol.NewTokenBucketRateLimiter(writeQPS, writeBurst), written: map[string]string{}}
}

// put queues a write of object key whose content is digest; false when
// the queue is full (the next sync queues it again).
func (q *writeQueue) put(key, digest string, do func(context.Context) error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.written[key] == digest {
		delete(q.pending, key) // what is there already
		return true
	}
	if _, ok := q.pending[key]; !ok {
		if len(q.pending) >= maxPendingWrites {
			return false
		}
		q.order = append(q.order, key)
	}
	q.pending[key] = pendingWrite{digest: digest, do: do}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// take is the oldest pending write.
func (q *writeQueue) take() (string, pendingWrite, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		key := q.order[0]
		q.order = q.order[1:]
		if w, ok := q.pending[key]; ok {
			delete(q.pending, key)
			return key, w, true
		}
	}
	return "", pendingWrite{}, false
}

func (q *writeQueue) done(key, digest string, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		delete(q.written, key)
		return
	}
	q.written[key] = digest
}

// Pending is how many writes wait (tests).
func (q *writeQueue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// writeStatus writes the queued status, one object at a time, off every
// lock; a failed write makes the agent sync again after retryAfter.
func (a *Agent) writeStatus(ctx context.Context) {
	for {
		key, w, ok := a.writes.take()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-a.writes.wake:
				continue
			}
		}
		if err := a.writes.limit.Wait(ctx); err != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := w.do(wctx)
		cancel()
		a.writes.done(key, w.digest, err)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("write status to the API server; trying again", "object", key, "err", err, "after", retryAfter)
			time.AfterFunc(retryAfter, func() {
				select {
				case a.kick <- struct{}{}:
				default:
				}
			})
		}
	}
}

// nodeEntry is a node's entry of a policy's status.nodes.
type nodeEntry struct {
	Node               string      `json:"node"`
	ObservedGeneration int64       `json:"observedGeneration"`
	Pods               int         `json:"pods"`
	Conditions         []condition `json:"conditions"`
}

type condition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	ObservedGeneration int64       `json:"observedGeneration"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	Reason             string      `json:"reason"`
	Message            string      `json:"message"`
}

// policyCondition is what the node says of policy p: Admitted True, or
// False with why.
func (a *Agent) policyCondition(p *Policy, m Mapping, refused map[string]error) (status, reason, msg string) {
	if err, ok := m.Invalid[p.ID()]; ok {
		return "False", "Invalid", "node " + a.node + " cannot read the policy: " + err.Error()
	}
	id := p.ID()
	var why []string
	seen := map[string]bool{}
	for _, key := range m.Entries[id] {
		if err := refused[key]; err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			why = append(why, err.Error())
		}
	}
	if m.LinkFrom == id && a.linkErr != "" {
		why = append(why, a.linkErr)
	}
	if len(why) > 0 {
		more := ""
		if len(why) > maxConditionRefusals {
			more = fmt.Sprintf("; and %d more", len(why)-maxConditionRefusals)
			why = why[:maxConditionRefusals]
		}
		return "False", "Refused", "on node " + a.node + ": " + strings.Join(why, "; ") + more
	}
	n := len(m.Selected[id])
	msg = fmt.Sprintf("node %s applies it to %d pods", a.node, n)
	if m.LinkFrom == id {
		msg += " and to its link"
	}
	return "True", "Admitted", msg
}

// writePolicyStatus queues the node's entry of every policy whose entry
// changes.
func (a *Agent) writePolicyStatus(s *informers, v View, m Mapping, refused map[string]error) {
	if s.qos == nil {
		return
	}
	for _, p := range v.Policies {
		u := policyObject(s, p)
		if u == nil {
			continue
		}
		id := p.ID()
		_, invalid := m.Invalid[id]
		relevant := len(m.Selected[id]) > 0 || invalid || m.LinkFrom == id
		cur, had := a.ownEntry(u)
		var body map[string]any
		var digest string
		if relevant {
			status, reason, msg := a.policyCondition(p, m, refused)
			if len(msg) > maxNote {
				msg = msg[:maxNote-3] + "..."
			}
			since := metav1.Now()
			if had && len(cur.Conditions) > 0 && cur.Conditions[0].Status == status {
				since = cur.Conditions[0].LastTransitionTime
			}
			e := nodeEntry{Node: a.node, ObservedGeneration: p.Generation, Pods: len(m.Selected[id]),
				Conditions: []condition{{Type: conditionAdmitted, Status: status, ObservedGeneration: p.Generation,
					LastTransitionTime: since, Reason: reason, Message: msg}}}
			digest = fmt.Sprintf("%s|%d|%d|%s|%s|%s", u.GetUID(), e.ObservedGeneration, e.Pods, status, reason, msg)
			if had && entryDigest(u, cur) == digest {
				a.writes.done(id, digest, nil)
				continue
			}
			body = map[string]any{"nodes": []nodeEntry{e}}
		} else {
			if !had {
				continue
			}
			digest = string(u.GetUID()) + "|none"
			body = map[string]any{"nodes": []nodeEntry{}}
		}
		gvr := resQoSPolicy
		if p.Kind == KindClusterQoSPolicy {
			gvr = resClusterQoSPolicy
		}
		obj := map[string]any{"apiVersion": GroupVersion.String(), "kind": p.Kind,
			"metadata": map[string]any{"name": p.Name}, "status": body}
		if p.Namespace != "" {
			obj["metadata"].(map[string]any)["namespace"] = p.Namespace
		}
		ns, name := p.Namespace, p.Name
		if !a.writes.put(id, digest, func(ctx context.Context) error { return a.apply(ctx, gvr, ns, name, obj, "status") }) {
			a.log.Warn("the status write queue is full; the policy's status waits for the next sync", "policy", id)
		}
	}
}

// ownEntry is the node's entry in policy object u's status.
func (a *Agent) ownEntry(u *unstructured.Unstructured) (nodeEntry, bool) {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok || m["node"] != a.node {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nodeEntry{}, false
		}
		var e nodeEntry
		if json.Unmarshal(b, &e) != nil {
			return nodeEntry{}, false
		}
		return e, true
	}
	return nodeEntry{}, false
}

func entryDigest(u *unstructured.Unstructured, e nodeEntry) string {
	if len(e.Conditions) == 0 {
		return ""
	}
	c := e.Conditions[0]
	return fmt.Sprintf("%s|%d|%d|%s|%s|%s", u.GetUID(), e.ObservedGeneration, e.Pods, c.Status, c.Reason, c.Message)
}

// apply server-side-applies obj to resource gvr's object ns/name (its
// subresource, if given) as the node's field manager.
func (a *Agent) apply(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, obj map[string]any, sub ...string) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", gvr.Resource, name, err)
	}
	force := true
	r := a.dyn.Resource(gvr)
	var ri interface {
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
	} = r
	if ns != "" {
		ri = r.Namespace(ns)
	}
	if _, err := ri.Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: a.fieldManager(), Force: &force}, sub...); err != nil {
		return fmt.Errorf("apply %s %s: %w", strings.Join(append([]string{gvr.Resource}, sub...), "/"), name, err)
	}
	return nil
}

func (a *Agent) fieldManager() string {
	fm := "hostqos-" + a.node
	if len(fm) > 128 {
		fm = fm[:128]
	}
	return fm
}

// LinkSource gives the node's links (the engine's Links): a Target that
// has it gets its links written to the node's HostQoSNode.
type LinkSource interface {
	Links() []api.LinkStatus
}

// nodeLink is a link of a HostQoSNode's status.
type nodeLink struct {
	Name        string `json:"name"`
	EgressRate  string `json:"egressRate,omitempty"`
	IngressRate string `json:"ingressRate,omitempty"`
	Reservable  string `json:"reservable,omitempty"`
	Admitted    string `json:"admitted,omitempty"`
	Guarantees  int    `json:"guarantees"`
}

// writeNodeStatus queues the node's HostQoSNode: its links' capacity and
// admitted guarantees, and the agent's last sync (refreshed at most every
// nodeStatusEvery when nothing else changed).
func (a *Agent) writeNodeStatus(now time.Time) {
	if a.Status().PolicyError != "" {
		return // no CRDs
	}
	var links []nodeLink
	if ls, ok := a.target.(LinkSource); ok {
		for _, l := range ls.Links() {
			nl := nodeLink{Name: l.Name, Reservable: l.Reservable.String(), Admitted: l.Reserved.String(), Guarantees: len(l.Guarantees)}
			if l.EgressRate > 0 {
				nl.EgressRate = l.EgressRate.String()
			}
			if l.IngressRate > 0 {
				nl.IngressRate = l.IngressRate.String()
			}
			links = append(links, nl)
		}
	}
	slices.SortFunc(links, func(x, y nodeLink) int { return strings.Compare(x.Name, y.Name) })
	b, _ := json.Marshal(links)
	digest := string(b)
	if digest == a.nodeDigest && now.Sub(a.nodeWritten) < nodeStatusEvery {
		return
	}
	a.nodeDigest, a.nodeWritten = digest, now
	if links == nil {
		links = []nodeLink{}
	}
	status := map[string]any{
		"agent": map[string]any{"version": a.cfg.Version, "lastSync": now.UTC().Format(time.RFC3339)},
		"links": links,
	}
	meta := map[string]any{"name": a.node, "labels": map[string]any{"app.kubernetes.io/name": "hostqos"}}
	obj := map[string]any{"apiVersion": GroupVersion.String(), "kind": "HostQoSNode", "metadata": meta}
	withStatus := maps.Clone(obj)
	withStatus["status"] = status
	key := "HostQoSNode " + a.node
	a.writes.put(key, digest+now.String(), func(ctx context.Context) error {
		if !a.nodeMade {
			if err := a.apply(ctx, resHostQoSNode, "", a.node, obj); err != nil {
				return err
			}
			a.nodeMade = true
		}
		return a.apply(ctx, resHostQoSNode, "", a.node, withStatus, "status")
	})
}
