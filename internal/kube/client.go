package kube

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// The agent's REST clients know only the kinds it reads and writes (core
// v1: pods; events.k8s.io v1: events). client-go's clientset and its
// scheme register every API group of Kubernetes when the program starts,
// which would double hostqosd's binary and grow every daemon's memory,
// with or without [kubernetes]. Made when the first client is.
var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // the types' own registration: cannot fail
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
})

// restClient is a client of group version gv under path ("/api" for the
// core group, "/apis" for the others).
func restClient(base *rest.Config, gv schema.GroupVersion, path string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(base)
	c.GroupVersion, c.APIPath = &gv, path
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme()).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("make Kubernetes client for %s: %w", gv, err)
	}
	return rc, nil
}
