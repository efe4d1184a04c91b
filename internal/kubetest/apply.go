package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the field manager of what Apply writes.
const FieldManager = "hostqos-kubetest"

// crdGK is the kind of a CustomResourceDefinition, which Apply waits on.
var crdGK = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// mapper maps kinds to resources through discovery, forgetting what it
// learned when a kind is unknown (a CRD applied since).
type mapper struct {
	m *restmapper.DeferredDiscoveryRESTMapper
}

func newMapper(dc discovery.DiscoveryInterface) *mapper {
	return &mapper{m: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// A kind still unknown after noMatchWait is an error (a CRD that is
// Established is in discovery well before).
const noMatchWait = 15 * time.Second

func (m *mapper) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	ctx, cancel := context.WithTimeout(ctx, noMatchWait)
	defer cancel()
	for {
		rm, err := m.m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return rm, nil
		}
		if !meta.IsNoMatchError(err) {
			return nil, err
		}
		m.m.Reset()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("map %s to a resource: %w", gvk, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Apply applies every object of a YAML or JSON stream (documents separated
// by ---) in order, with server-side apply as the admin, and fails the
// test on the first refusal. After a CustomResourceDefinition it waits
// until the definition is Established, so a later document (or the next
// call) may use the new kind.
func (cp *ControlPlane) Apply(tb testing.TB, manifests string) {
	tb.Helper()
	if err := cp.ApplyAs(cp.Dynamic, manifests); err != nil {
		tb.Fatal(err)
	}
}

// ApplyFile is Apply of a file's contents.
func (cp *ControlPlane) ApplyFile(tb testing.TB, path string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	cp.Apply(tb, string(b))
}

// ApplyAs is Apply through the given client (the admin's, or one made
// from a ServiceAccountConfig) and returns the first error, the API
// server's own (apierrors.IsInvalid, IsForbidden, …) wrapped with the
// object's kind and name: a test of the server's validation or RBAC looks
// at it.
func (cp *ControlPlane) ApplyAs(client dynamic.Interface, manifests string) error {
	objs, err := decodeManifests(manifests)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		what := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
		if ns := obj.GetNamespace(); ns != "" {
			what = fmt.Sprintf("%s %s/%s", gvk.Kind, ns, obj.GetName())
		}
		rm, err := cp.mapper.mapping(ctx, gvk)
		if err != nil {
			return fmt.Errorf("apply %s: %w", what, err)
		}
		var ri dynamic.ResourceInterface = client.Resource(rm.Resource)
		if rm.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = client.Resource(rm.Resource).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply %s: %w", what, err)
		}
		if gvk.GroupKind() == crdGK {
			if err := cp.waitEstablished(ctx, rm, obj.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitEstablished waits until the CRD name has the condition Established
// and its kind is served (discovery knows it).
func (cp *ControlPlane) waitEstablished(ctx context.Context, rm *meta.RESTMapping, name string) error {
	for {
		crd, err := cp.Dynamic.Resource(rm.Resource).Get(ctx, name, metav1.GetOptions{})
		if err == nil && established(crd) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for CRD %s to be established: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cp.mapper.m.Reset()
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// decodeManifests splits a YAML or JSON stream into objects, skipping
// empty documents; each must name its apiVersion, kind and name.
func decodeManifests(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifests)), 4096)
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode manifest document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("decode manifest document %d: it needs apiVersion, kind and metadata.name", i)
		}
		objs = append(objs, obj)
	}
}
