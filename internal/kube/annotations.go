package kube

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// The pod annotations the agent reads (docs/kubernetes.md). The bandwidth
// CNI plugin's two, in its units, and hostqos's own; hostqos's win over
// the plugin's when a pod has both.
const (
	AnnotationEgress   = "kubernetes.io/egress-bandwidth"
	AnnotationIngress  = "kubernetes.io/ingress-bandwidth"
	AnnotationClass    = "hostqos.io/class"
	AnnotationDSCP     = "hostqos.io/dscp"
	AnnotationMinBW    = "hostqos.io/minbw"
	AnnotationMaxBW    = "hostqos.io/maxbw"
	AnnotationMaxBWIn  = "hostqos.io/maxbw-in"
	maxAnnotationValue = 64 // longer values are not rates, DSCPs or class names
)

// Annotations are the annotations the agent reads, in the order it reads
// them.
var Annotations = []string{AnnotationEgress, AnnotationIngress, AnnotationClass, AnnotationDSCP, AnnotationMinBW, AnnotationMaxBW, AnnotationMaxBWIn}

// PodPolicyOf is what pod's annotations ask of the engine; false when the
// pod has none of them, or cannot be running (finished, or not bound to a
// node). A value the agent cannot read refuses the pod (PodPolicy.Err,
// naming the annotation): it keeps what it had.
func PodPolicyOf(pod *corev1.Pod) (engine.PodPolicy, bool) {
	if !mayRun(pod) {
		return engine.PodPolicy{}, false
	}
	f, found, errs := annotationFields(pod)
	if !found {
		return engine.PodPolicy{}, false
	}
	pp := engine.PodPolicy{Pod: engine.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}}
	f.apply(&pp.Pod)
	if len(errs) > 0 {
		pp.Err = errs
	}
	return pp, true
}

// annotationFields are the settings pod's annotations give; found: it
// has one of them. The values it cannot read are errs, naming the
// annotation.
func annotationFields(pod *corev1.Pod) (f podFields, found bool, errs policy.Errors) {
	for _, a := range Annotations {
		if _, ok := pod.Annotations[a]; ok {
			found = true
			break
		}
	}
	if !found {
		return f, false, nil
	}
	key := pod.Namespace + "/" + pod.Name
	fail := func(annotation, value, reason, fix string) {
		errs = append(errs, &policy.FieldError{Source: engine.PodSource, Object: "pod " + key,
			Field: annotation, Value: policy.Clip(value), Reason: reason, Fix: fix})
	}
	rate := func(annotation string, into **policy.Rate) {
		v, ok := pod.Annotations[annotation]
		if !ok {
			return
		}
		r, err := parseRate(v)
		if err != nil {
			fail(annotation, v, err.Error(), "e.g. 10M (bits per second, as the bandwidth plugin reads it) or 10mbit")
			return
		}
		*into = &r
	}
	rate(AnnotationEgress, &f.maxbw)
	rate(AnnotationIngress, &f.maxIn)
	rate(AnnotationMinBW, &f.minbw)
	rate(AnnotationMaxBW, &f.maxbw)
	rate(AnnotationMaxBWIn, &f.maxIn)
	if v, ok := pod.Annotations[AnnotationDSCP]; ok {
		d, err := policy.ParseDSCP(v)
		if err != nil || len(v) > maxAnnotationValue {
			fail(AnnotationDSCP, v, "not a DSCP", "0..63 or a name such as EF, AF41, CS1")
		} else {
			f.dscp = &d
		}
	}
	if v, ok := pod.Annotations[AnnotationClass]; ok {
		if v == "" || len(v) > maxAnnotationValue {
			fail(AnnotationClass, v, "not a class name", "a class of the node, e.g. voice, interactive, bulk")
		} else {
			f.class = &v
		}
	}
	return f, true, errs
}

// parseRate reads a rate as hostqos writes it (10mbit, 2.5MB/s) or as the
// bandwidth plugin does, a Kubernetes quantity of bits per second (10M,
// 1Gi, 500k).
func parseRate(s string) (policy.Rate, error) {
	if len(s) > maxAnnotationValue {
		return 0, errors.New("too long to be a rate")
	}
	r, perr := policy.ParseRate(s)
	if perr == nil {
		return r, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, perr
	}
	if q.CmpInt64(int64(policy.MaxRate)) > 0 {
		return 0, fmt.Errorf("%s is above %s, the most a rate may be", s, policy.MaxRate)
	}
	if q.Sign() < 0 || q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%s is not a whole number of bits per second", s)
	}
	return policy.Rate(q.Value()), nil
}
