// Package kube is hostqosd's Kubernetes node agent (docs/kubernetes.md):
// a client-go informer on the pods bound to the node, whose annotations
// it maps to the engine's pod policy (engine.SetPods), and a Kubernetes
// Event on every pod the engine refuses. It is a front door: it holds no
// policy of its own and never talks to the kernel. With the API server
// unreachable it changes nothing (the engine keeps enforcing the last
// known pods, from its state file across restarts); when the server
// answers again it lists the node's pods afresh and syncs.
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// Target is what the agent drives: the engine's pods.
type Target interface {
	SetPods([]engine.PodPolicy) (map[string]error, error)
}

// Config is the agent's: the config file's [kubernetes] table.
type Config struct {
	// Kubeconfig is a kubeconfig file ("": in-cluster credentials).
	Kubeconfig string
	// NodeName is its node ("": $NODE_NAME, else the host name).
	NodeName string
	// UserAgent names the agent to the API server; Version is hostqosd's
	// (its HostQoSNode says it).
	UserAgent string
	Version   string
	Logger    *slog.Logger
	// REST, if set, is used instead of Kubeconfig (tests).
	REST *rest.Config
}

// Timing. Changes are coalesced: a burst of pod events is one sync. While
// the API server does not answer, the agent asks /version every
// probeEvery; a failed sync of the engine is tried again after retryAfter.
const (
	coalesce   = 100 * time.Millisecond
	probeEvery = time.Second
	retryAfter = 2 * time.Second
	// Events: at most eventBurst at once and eventQPS a second after
	// that; a pod's refusal is reported once per distinct reason.
	eventQPS   = 1
	eventBurst = 10
	eventQueue = 64
	maxNote    = 1024 // events.k8s.io's limit on a note
	// maxEventPrefix is as much of a pod's name as its Event's name
	// takes (the rest is a timestamp, within a name's 253 bytes).
	maxEventPrefix = 200
	controller     = "hostqos.io/node-agent"
)

// Agent is the running node agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	node string
	// The two API groups the agent uses (client.go).
	core   *rest.RESTClient  // core v1 (pods, namespaces, nodes, /version)
	evAPI  *rest.RESTClient  // events.k8s.io v1
	dyn    dynamic.Interface // hostqos.io v1alpha1 (unstructured)
	target Target

	// Of the sync loop alone: the policies read, by UID; the HostQoSNode
	// last queued; why the cluster's link did not apply.
	parsed      map[string]parsedPolicy
	nodeDigest  string
	nodeWritten time.Time
	linkErr     string
	linkDone    string
	// Of the status writer alone: its HostQoSNode exists.
	nodeMade bool
	writes   *writeQueue

	kick    chan struct{} // a pod changed
	suspect chan struct{} // a watch failed: is the server gone?
	events  chan podEvent
	limit   flowcontrol.RateLimiter

	requests atomic.Uint64 // sent to the API server

	mu sync.Mutex
	st api.KubernetesStatus
	// reported are the refusals an Event was sent for, by pod UID (only
	// pods refused now: bounded by the node's pods).
	reported map[string]string
}

// podEvent is an Event to write on a pod.
type podEvent struct {
	pod  *corev1.Pod
	note string
}

// New makes the agent: its credentials, its node and its client. It does
// not reach the API server. client-go's own log (klog) goes to
// cfg.Logger from then on.
func New(cfg Config, target Target) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	klog.SetSlogLogger(cfg.Logger.With("component", "client-go"))
	rc := cfg.REST
	if rc == nil {
		var err error
		if cfg.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("read Kubernetes credentials: %w", err)
		}
	}
	node, err := nodeName(cfg.NodeName)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger, node: node, target: target,
		kick: make(chan struct{}, 1), suspect: make(chan struct{}, 1), events: make(chan podEvent, eventQueue),
		limit:    flowcontrol.NewTokenBucketRateLimiter(eventQPS, eventBurst),
		st:       api.KubernetesStatus{Node: node},
		reported: map[string]string{},
		parsed:   map[string]parsedPolicy{},
		writes:   newWriteQueue(),
	}
	rc = rest.CopyConfig(rc)
	if cfg.UserAgent != "" {
		rc.UserAgent = cfg.UserAgent
	}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return watchful{rt, a} })
	if a.core, err = restClient(rc, corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, err
	}
	if a.evAPI, err = restClient(rc, eventsv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	if a.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("make Kubernetes client for %s: %w", GroupVersion, err)
	}
	return a, nil
}

// watchful tells the agent of every request that got no answer (the
// informer's watch retries included, which it keeps to itself): the API
// server may be gone.
type watchful struct {
	rt http.RoundTripper
	a  *Agent
}

func (w watchful) RoundTrip(r *http.Request) (*http.Response, error) {
	w.a.requests.Add(1)
	resp, err := w.rt.RoundTrip(r)
	if err != nil && r.Context().Err() == nil {
		select {
		case w.a.suspect <- struct{}{}:
		default:
		}
	}
	return resp, err
}

// nodeName is the configured node name, else $NODE_NAME, else the host
// name (lower case, as Kubernetes registers it).
func nodeName(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	name := os.Getenv("NODE_NAME")
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("find the node name: %w (set node_name in [kubernetes])", err)
		}
		name = strings.ToLower(h)
	}
	if !policy.ValidNodeName(name) {
		return "", fmt.Errorf("node name %q is not a Kubernetes node name; set node_name in [kubernetes]", policy.Clip(name))
	}
	return name, nil
}

// Node is the node whose pods the agent enforces.
func (a *Agent) Node() string { return a.node }

// Status is the agent's connection and last sync.
func (a *Agent) Status() api.KubernetesStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	st.Requests = a.requests.Load()
	return st
}

// Run watches the node's pods and syncs them to the target until ctx
// ends.
func (a *Agent) Run(ctx context.Context) {
	go a.writeEvents(ctx)
	go a.writeStatus(ctx)
	for ctx.Err() == nil {
		a.runInformer(ctx)
	}
}

// runInformer runs one set of informers until ctx ends or the API
// server, after it stopped answering, answers again (or begins to serve
// the CRDs): then the caller starts a fresh set, which lists everything
// anew (the engine keeps the last known until it has synced).
func (a *Agent) runInformer(ctx context.Context) {
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	served, err := a.policiesServed(ictx)
	if err != nil {
		if ictx.Err() != nil {
			return
		}
		if a.Status().Connected || a.Status().Since.IsZero() {
			a.log.Warn("the API server does not answer; the node keeps enforcing the last known pods", "err", err)
		}
		a.setConnected(false, err.Error())
		select {
		case <-ictx.Done():
		case <-time.After(probeEvery):
		}
		return
	}
	a.setPolicies(served)
	a.parsed = map[string]parsedPolicy{}
	kick := func() {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	s := a.newInformers(served, kick)
	ran := make(chan struct{})
	infs := s.all()
	for _, inf := range infs {
		go func() {
			defer func() { ran <- struct{}{} }()
			inf.RunWithContext(ictx)
		}()
	}
	defer func() {
		stop()
		for range infs {
			<-ran
		}
	}()
	back := make(chan struct{})
	go a.probe(ictx, back)
	synced, coreSynced := make(chan struct{}), make(chan struct{})
	for ch, done := range map[chan struct{}]cache.InformerSynced{synced: s.hasSynced, coreSynced: s.coreSynced} {
		go func() {
			if cache.WaitForCacheSync(ictx.Done(), done) {
				close(ch)
			}
		}()
	}
	// The policies not listed policyGrace after the rest: the agent
	// cannot list them (its RBAC); it enforces the annotations meanwhile.
	var grace <-chan time.Time
	var lookAgain <-chan time.Time
	if !served {
		lookAgain = time.After(policiesProbeInterval)
	}
	var retry <-chan time.Time
	for {
		select {
		case <-ictx.Done():
			return
		case <-back:
			a.log.Info("the API server answers again; listing anew")
			return
		case <-lookAgain:
			if ok, err := a.policiesServed(ictx); err == nil && ok {
				a.log.Info("the API server serves the hostqos.io CRDs now; listing anew with the policies")
				return
			}
			lookAgain = time.After(policiesProbeInterval)
		case <-coreSynced:
			coreSynced = nil
			if synced != nil {
				grace = time.After(policyGrace)
			}
		case <-grace:
			grace = nil
			if synced == nil {
				continue
			}
			synced = nil // the policies apply when their informers have listed them
			a.setPolicyError(errPoliciesNotListed)
			a.setConnected(true, "")
			retry = a.syncOrRetry(s)
		case <-synced:
			synced, grace = nil, nil
			a.setConnected(true, "")
			retry = a.syncOrRetry(s)
		case <-a.kick:
			if synced != nil {
				continue // the first sync takes everything
			}
			select { // coalesce a burst
			case <-time.After(coalesce):
			case <-ictx.Done():
				return
			}
			select {
			case <-a.kick:
			default:
			}
			retry = a.syncOrRetry(s)
		case <-retry:
			retry = a.syncOrRetry(s)
		}
	}
}

// setPolicyError says why the agent enforces no policy ("": it does).
func (a *Agent) setPolicyError(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != "" && a.st.PolicyError != msg {
		a.log.Warn(msg)
	}
	a.st.PolicyError = msg
}

// setPolicies notes whether the API server serves the policies.
func (a *Agent) setPolicies(served bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if served {
		a.st.PolicyError = ""
		return
	}
	if a.st.PolicyError == "" {
		a.log.Warn(errPoliciesNotServed.Error())
	}
	a.st.PolicyError = errPoliciesNotServed.Error()
}

// probe asks the API server for its version after a request failed, every
// probeEvery until it answers: a failure marks the agent disconnected; an
// answer after a failure closes back (start afresh).
func (a *Agent) probe(ctx context.Context, back chan<- struct{}) {
	failed := false
	for {
		if !failed {
			select {
			case <-ctx.Done():
				return
			case <-a.suspect:
			}
		}
		pctx, cancel := context.WithTimeout(ctx, probeEvery)
		_, err := a.core.Get().AbsPath("/version").Do(pctx).Raw()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if failed {
				close(back)
				return
			}
			continue
		}
		if !failed {
			a.log.Warn("the API server does not answer; the node keeps enforcing the last known pods", "err", err)
		}
		failed = true
		a.setConnected(false, err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(probeEvery):
		}
	}
}

func (a *Agent) setConnected(ok bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st.Connected != ok || a.st.Since.IsZero() {
		a.st.Since = time.Now()
	}
	a.st.Connected, a.st.Error = ok, policy.Clip(why)
}

// syncOrRetry syncs and, on an error of the engine or a refusal whose
// Event had to wait for the rate limit, says when to try again.
func (a *Agent) syncOrRetry(s *informers) <-chan time.Time {
	deferred, err := a.sync(s)
	if err != nil {
		a.log.Warn("apply the node's pods; trying again", "err", err, "after", retryAfter)
		return time.After(retryAfter)
	}
	if deferred {
		return time.After(retryAfter)
	}
	return nil
}

// sync hands the target what the caches ask of it, reports its
// refusals (an Event per pod, a condition per policy) and the node's
// links; deferred: an Event waits for the rate limit.
func (a *Agent) sync(s *informers) (deferred bool, err error) {
	if s.qos != nil && s.hasSynced() && a.Status().PolicyError != "" {
		a.log.Info("the policies are listed; enforcing them")
		a.setPolicyError(nil)
	}
	v := a.view(s)
	m := Map(v)
	a.applyLink(m) // first: the pods are admitted against the link it sets
	refused, err := a.target.SetPods(m.Pods)
	if err != nil {
		return false, err
	}
	now := time.Now()
	pods := map[string]bool{}
	refusedPods := map[string]bool{}
	// One note per refused pod: its entries' distinct refusals, with who
	// gave the settings.
	notes := map[string][]string{}
	for _, key := range sortedKeys(refused) {
		pod := m.PodOf[key]
		if pod == nil {
			continue
		}
		refusedPods[string(pod.UID)] = true
		n := refused[key].Error()
		if src := m.Sources[key]; len(src) > 0 && !(len(src) == 1 && src[0] == "annotations") {
			n += " (settings from " + strings.Join(src, ", ") + ")"
		}
		if !slices.Contains(notes[string(pod.UID)], n) {
			notes[string(pod.UID)] = append(notes[string(pod.UID)], n)
		}
	}
	for _, p := range m.PodOf {
		pods[string(p.UID)] = true
	}
	a.mu.Lock()
	a.st.LastSync = now
	a.st.Pods, a.st.Refused, a.st.Policies = len(pods), len(refusedPods), len(m.Selected)
	reported := map[string]string{}
	var send []podEvent
	for _, key := range sortedKeys(refused) {
		pod := m.PodOf[key]
		if pod == nil {
			continue
		}
		uid := string(pod.UID)
		if _, done := reported[uid]; done {
			continue
		}
		note := strings.Join(notes[uid], "; ")
		if a.reported[uid] == note {
			reported[uid] = note
			continue
		}
		if !a.limit.TryAccept() {
			deferred = true // reported at the next sync
			continue
		}
		reported[uid] = note
		send = append(send, podEvent{pod: pod, note: note})
	}
	a.reported = reported
	a.mu.Unlock()
	for _, ev := range send {
		a.log.Warn("a pod's QoS refused", "pod", ev.pod.Namespace+"/"+ev.pod.Name, "err", ev.note)
		select {
		case a.events <- ev:
		default:
			a.forget(string(ev.pod.UID))
		}
	}
	a.writePolicyStatus(s, v, m, refused)
	a.writeNodeStatus(now)
	return deferred, nil
}

// forget makes the next sync report a pod's refusal again.
func (a *Agent) forget(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.reported, uid)
}

// Reported are the refusals reported by Event, by pod UID (tests).
func (a *Agent) Reported() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.reported)
}

// writeEvents writes the queued Events, one at a time, off every lock.
func (a *Agent) writeEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-a.events:
			if err := a.writeEvent(ctx, ev); err != nil && ctx.Err() == nil {
				a.log.Warn("write an Event on a pod; its refusal is reported again at the next sync", "pod", ev.pod.Namespace+"/"+ev.pod.Name, "err", err)
				a.forget(string(ev.pod.UID))
			}
		}
	}
}

// writeEvent writes a Warning Event (events.k8s.io/v1) on a pod whose QoS
// the node refused.
func (a *Agent) writeEvent(ctx context.Context, ev podEvent) error {
	now := time.Now()
	note := "hostqos on node " + a.node + " did not apply the pod's QoS (it keeps what it had): " + ev.note
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	prefix := ev.pod.Name
	if len(prefix) > maxEventPrefix {
		prefix = strings.TrimRight(prefix[:maxEventPrefix], "-.")
	}
	e := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", prefix, now.UnixNano()), Namespace: ev.pod.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: controller,
		ReportingInstance:   controller + "-" + a.node,
		Action:              "ApplyQoS",
		Reason:              "QoSRefused",
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ev.pod.Namespace, Name: ev.pod.Name,
			UID: ev.pod.UID, ResourceVersion: ev.pod.ResourceVersion},
		Note: note,
		Type: corev1.EventTypeWarning,
	}
	if len(e.ReportingInstance) > 128 {
		e.ReportingInstance = e.ReportingInstance[:128]
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := a.evAPI.Post().Namespace(ev.pod.Namespace).Resource("events").Body(e).Do(wctx).Error()
	if err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
