package engine

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

const podConfig = `
[[link]]
name = "eth0"
egress_rate = "100mbit"

[[rule]]
name = "node"
proto = "udp"
minbw = "30mbit"
`

const (
	uidWeb = "11111111-2222-4333-8444-555555555555"
	uidDB  = "66666666-7777-4888-8999-aaaaaaaaaaaa"
)

// webPod is pod app/web with a 5 Mbit/s ceiling.
func webPod() PodPolicy {
	return PodPolicy{Pod: Pod{Namespace: "app", Name: "web", UID: uidWeb, DSCP: policy.NoDSCP, MaxBW: 5e6}}
}

// podContainers are a container of pod web and one of pod db.
var podContainers = []derive.Container{
	{Runtime: "containerd", ID: "aaaa11112222", Name: "web", NetnsCookie: 41, Veths: []int{7}, PodUID: uidWeb},
	{Runtime: "containerd", ID: "bbbb11112222", Name: "db", NetnsCookie: 42, Veths: []int{8}, PodUID: uidDB},
}

// TestPodsApplyAndRefuse: a pod's settings become a rule that selects its
// containers, listed as k8s/NAMESPACE/NAME from source kubernetes; a pod
// whose guarantee does not fit the link's budget (with the node's rule
// and the other pods) is refused whole with the numbers and keeps what it
// had, while the others apply; an invalid pod is refused with the field;
// a local rule remove or set of a pod's rule is refused; a pod gone leaves
// no rule; a change that fails in the kernel changes nothing.
func TestPodsApplyAndRefuse(t *testing.T) {
	env := newEnv(t, podConfig)
	e, _ := env.startContainers(t)
	e.SetContainers(podContainers)
	sub, err := e.Subscribe(root, nil, []string{"pod"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	web := webPod()
	db := PodPolicy{Pod: Pod{Namespace: "app", Name: "db", UID: uidDB, Class: "bulk", DSCP: policy.NoDSCP, MinBW: 40e6}}
	refused, err := e.SetPods([]PodPolicy{web, db})
	if err != nil || len(refused) != 0 {
		t.Fatalf("SetPods: refused %v, err %v", refused, err)
	}
	if got, want := ruleCgroups(e, env.k, "k8s/app/web"), []datapath.CgroupRef{{ID: datapath.ContainerKey(41)}}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod web's rule selects %v, want its container %v", got, want)
	}
	if !hasLeaf(env, 5e6) {
		t.Errorf("no 5 Mbit/s leaf for pod web on eth0: %+v", env.k.Trees[2])
	}
	list, err := e.Rules(nobody, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ri := range list {
		names = append(names, ri.Rule.Name+"("+ri.Source+")")
	}
	if want := "k8s/app/db(kubernetes) k8s/app/web(kubernetes) node(config)"; strings.Join(names, " ") != want {
		t.Errorf("rule list %q, want %q", strings.Join(names, " "), want)
	}
	if ri, err := e.Rules(root, "k8s/app/web"); err != nil || len(ri) != 1 || ri[0].Rule.MaxBW != 5e6 || ri[0].Slot < 0 {
		t.Errorf("rule show k8s/app/web: %+v, %v", ri, err)
	}
	ctrs, err := e.ContainerList(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrs {
		if want := "k8s/app/" + c.Name; len(c.Rules) != 1 || c.Rules[0] != want {
			t.Errorf("container list: %s has rules %v, want its pod's %s", c.Name, c.Rules, want)
		}
	}
	env.k.Lock()
	env.k.Counters = make([]datapath.Counters, 64)
	env.k.Unlock()
	var st api.Stats
	if err := e.Stats(nobody, "rules", &st); err != nil {
		t.Fatal(err)
	}
	var stats []string
	for _, r := range st.Rules {
		stats = append(stats, r.Rule+"/"+r.Class)
	}
	if !slices.Contains(stats, "k8s/app/web/default") || !slices.Contains(stats, "k8s/app/db/bulk") {
		t.Errorf("stat rules names %v; want the pods' rules with their classes", stats)
	}

	// db asks for 60 Mbit/s: 30 (node) + 60 > 80 reservable. Refused
	// whole: its class change does not apply either, and it keeps its
	// 40 Mbit/s; web's new ceiling applies.
	db2 := db
	db2.MinBW, db2.Class = 60e6, "voice"
	web2 := web
	web2.MaxBW = 10e6
	refused, err = e.SetPods([]PodPolicy{web2, db2})
	if err != nil {
		t.Fatal(err)
	}
	var fe *policy.FieldError
	if r := refused["app/db"]; !errors.As(r, &fe) || fe.Field != "minbw" || !strings.Contains(r.Error(), "90mbit") ||
		!strings.Contains(r.Error(), "80mbit") || !strings.Contains(r.Error(), "rule node 30mbit") {
		t.Errorf("pod db's refusal: %v; want field minbw naming 90mbit over 80mbit and who holds what", r)
	}
	if len(refused) != 1 {
		t.Errorf("refused %v, want db alone", refused)
	}
	pods := e.Pods()
	if pods["app/db"].MinBW != 40e6 || pods["app/db"].Class != "bulk" || pods["app/web"].MaxBW != 10e6 {
		t.Errorf("pods after a refusal: %+v", pods)
	}
	if !hasLeaf(env, 10e6) {
		t.Errorf("pod web's ceiling not raised to 10 Mbit/s: %+v", env.k.Trees[2])
	}
	// The pods' guarantees count against a local rule too.
	if _, err := e.AddRule(context.Background(), root, policy.Rule{Name: "more", Proto: "tcp", MinBW: 20e6, DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}, false); err == nil || !strings.Contains(err.Error(), "app/db") {
		t.Errorf("a local guarantee over the budget with pods: %v; want a refusal naming pod app/db", err)
	}

	// Invalid settings: refused with the field; nothing else changes.
	bad := web2
	bad.Class = "nosuch"
	refused, err = e.SetPods([]PodPolicy{bad, db})
	if err != nil || !strings.Contains(refused["app/web"].Error(), "class") {
		t.Errorf("a pod with an unknown class: refused %v, err %v", refused, err)
	}
	if e.Pods()["app/web"].MaxBW != 10e6 {
		t.Error("an invalid pod lost its settings")
	}
	unreadable := web2
	unreadable.Err = errors.New("annotation hostqos.io/dscp: unknown DSCP")
	if refused, _ = e.SetPods([]PodPolicy{unreadable, db}); refused["app/web"] != unreadable.Err || e.Pods()["app/web"].MaxBW != 10e6 {
		t.Errorf("a pod the agent could not read: refused %v, pods %+v", refused, e.Pods())
	}

	// Owned by the cluster.
	for _, err := range []error{
		e.RemoveRule(context.Background(), root, "k8s/app/web"),
		func() error {
			_, err := e.SetRule(context.Background(), root, "k8s/app/web", []byte(`{"maxbw":"1mbit"}`), false)
			return err
		}(),
	} {
		var bre *BadRequestError
		if !errors.As(err, &bre) || !strings.Contains(err.Error(), "pod app/web") || !strings.Contains(err.Error(), "annotations") {
			t.Errorf("a local change of a pod's rule: %v; want a refusal saying the cluster owns it", err)
		}
	}

	// A failed push changes nothing.
	env.k.FailNth("ApplyRules", 1, errors.New("map full"))
	if _, err := e.SetPods([]PodPolicy{db}); err == nil {
		t.Error("SetPods over a failing kernel succeeded")
	}
	if len(e.Pods()) != 2 || ruleCgroups(e, env.k, "k8s/app/web") == nil {
		t.Errorf("a failed push removed pod web: %+v", e.Pods())
	}
	// Gone: no rule.
	if _, err := e.SetPods([]PodPolicy{db}); err != nil {
		t.Fatal(err)
	}
	if ruleCgroups(e, env.k, "k8s/app/web") != nil || hasLeaf(env, 10e6) {
		t.Error("pod web's rule or leaf left after it went")
	}
	if _, err := e.Rules(root, "k8s/app/web"); err == nil {
		t.Error("rule show of a pod that went succeeded")
	}

	// The event stream: what applied, each refusal once per reason,
	// what went.
	var got []string
	for evs := takeNow(sub); len(evs) > 0; evs = takeNow(sub) {
		got = append(got, kindsOf(evs)...)
	}
	want := []string{"pod.applied pod/app/db", "pod.applied pod/app/web", "pod.applied pod/app/web", "pod.refused pod/app/db",
		"pod.refused pod/app/web", "pod.refused pod/app/web", "pod.removed pod/app/web"}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%v\nwant\n%v", got, want)
	}
}

// TestPodsSurviveRestart: the admitted pods are in the state file; a
// restarted engine that hears nothing from the cluster enforces them.
func TestPodsSurviveRestart(t *testing.T) {
	env := newEnv(t, podConfig)
	e, _ := env.startContainers(t)
	e.SetContainers(podContainers)
	if refused, err := e.SetPods([]PodPolicy{webPod()}); err != nil || len(refused) != 0 {
		t.Fatalf("SetPods: %v, %v", refused, err)
	}
	e.Detach()
	e2, ck := env.startContainers(t)
	defer e2.Detach()
	_ = ck
	e2.SetContainers(podContainers)
	if p := e2.Pods()["app/web"]; p.MaxBW != 5e6 || p.UID != uidWeb {
		t.Errorf("pods after a restart: %+v", e2.Pods())
	}
	if ruleCgroups(e2, env.k, "k8s/app/web") == nil || !hasLeaf(env, 5e6) {
		t.Error("pod web not enforced after a restart")
	}
}

// hasLeaf says whether eth0's HTB tree has a leaf with ceiling ceil.
func hasLeaf(env *testEnv, ceil uint64) bool {
	for _, c := range env.k.Trees[2].Classes {
		if c.Ceil == ceil {
			return true
		}
	}
	return false
}

// TestPodFlows: a policy's flow selectors make more rules of the pod
// (k8s/NAMESPACE/NAME/FLOW) that select its containers' flows to them;
// they are admitted with the pod's own rule or none of them is (a flow's
// guarantee over the budget keeps what the pod had, all of it).
func TestPodFlows(t *testing.T) {
	env := newEnv(t, podConfig)
	e, _ := env.startContainers(t)
	e.SetContainers(podContainers)
	web := webPod()
	sip := PodPolicy{Pod: Pod{Namespace: "app", Name: "web", UID: uidWeb, DSCP: 46, Flow: "call.0", Proto: "udp",
		Remote: netip.MustParsePrefix("198.18.0.0/15"), RPort: policy.PortRange{From: 5060, To: 5061}}}
	if refused, err := e.SetPods([]PodPolicy{web, sip}); err != nil || len(refused) != 0 {
		t.Fatalf("SetPods: refused %v, err %v", refused, err)
	}
	ri, err := e.Rules(root, "k8s/app/web/call.0")
	if err != nil || len(ri) != 1 || ri[0].Rule.Proto != "udp" || ri[0].Rule.DSCP != 46 || ri[0].Rule.RPort.From != 5060 || ri[0].Source != "kubernetes" {
		t.Fatalf("rule show k8s/app/web/call.0: %+v, %v", ri, err)
	}
	if got := ruleCgroups(e, env.k, "k8s/app/web/call.0"); len(got) != 1 {
		t.Errorf("the flow's rule selects %v, want pod web's container", got)
	}
	// The flow asks for 60 Mbit/s: 30 (node) + 60 > 80. The pod's own
	// new ceiling does not apply either.
	big := sip
	big.MinBW = 60e6
	web2 := web
	web2.MaxBW = 7e6
	refused, err := e.SetPods([]PodPolicy{web2, big})
	if err != nil || refused["app/web"] == nil || refused["app/web/call.0"] == nil || !strings.Contains(refused["app/web"].Error(), "90mbit") {
		t.Fatalf("SetPods over the budget: refused %v, err %v", refused, err)
	}
	pods := e.Pods()
	if pods["app/web"].MaxBW != 5e6 || pods["app/web/call.0"].MinBW != 0 || len(pods) != 2 {
		t.Errorf("after a refused flow the pod has %+v; want what it had", pods)
	}
	// The flow gone: its rule goes.
	if _, err := e.SetPods([]PodPolicy{web}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Rules(root, "k8s/app/web/call.0"); err == nil {
		t.Error("the flow's rule stayed after it went")
	}
}
