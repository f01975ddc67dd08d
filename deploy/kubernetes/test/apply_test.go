package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

const fieldManager = "airlock-deploy-test"

// applier server-side applies objects through the dynamic client, finding
// each kind's resource by discovery, as kubectl apply --server-side does.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk, o.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s is namespaced but has no namespace", gvk.Kind, o.GetName())
		}
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

// apply server-side applies o with strict field validation (an unknown or
// duplicate field is an error, not a warning); dryRun: all admission and
// validation, nothing stored.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	r, err := a.resource(o)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := r.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
	if err != nil {
		return nil, fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return out, nil
}

// TestServerSideDryRun renders every kustomization and applies each of its
// objects to a real kube-apiserver with server-side apply and dryRun=All, so
// a wrong apiVersion, an unknown or misplaced field, or a value the API
// rejects fails here rather than at kubectl apply -k. The Namespace is
// applied for real first: dry-run objects need their namespace to exist.
func TestServerSideDryRun(t *testing.T) {
	ks := kustomizations(t)
	rendered := make([][]*unstructured.Unstructured, len(ks))
	for i, k := range ks {
		rendered[i] = render(t, k)
	}

	w := &warnings{}
	a := newApplier(t, startCluster(t, w))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for i, k := range ks {
		t.Run(k.name, func(t *testing.T) {
			objs := rendered[i]
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					if _, err := a.apply(ctx, o, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			w.take()
			var returned []*unstructured.Unstructured
			for _, o := range objs {
				out, err := a.apply(ctx, o, true)
				if err != nil {
					t.Error(err)
					continue
				}
				for _, warn := range w.take() {
					t.Errorf("%s %s: the API server warned: %s", o.GetKind(), o.GetName(), warn)
				}
				returned = append(returned, out)
			}
			if t.Failed() {
				return
			}
			// What the server would store keeps what the manifests promise.
			checkObjects(t, k.name, returned)
			checkDefaulted(t, index(returned))

			// Nothing but the Namespace was stored.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					continue
				}
				r, err := a.resource(o)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Get(ctx, o.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("%s %s after a dry run: err = %v, want NotFound", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}

	// The same path rejects broken manifests, so the passes above mean something.
	base := index(rendered[0])
	t.Run("rejects an unknown field", func(t *testing.T) {
		o := base.get(t, "Deployment", "airlock-api").DeepCopy()
		c := container(t, o, "airlock")
		c["livenessProbes"] = c["livenessProbe"] // a typo kubectl would apply with a warning only
		setContainer(t, o, c)
		_, err := a.apply(ctx, o, true)
		if err == nil || !strings.Contains(err.Error(), `containers[name="airlock"].livenessProbes: field not declared in schema`) {
			t.Fatalf("apply with an unknown field: err = %v, want an unknown-field error", err)
		}
		t.Logf("rejected as it should be: %v", err)
	})
	t.Run("rejects a wrong apiVersion", func(t *testing.T) {
		o := base.get(t, "DaemonSet", "airlock-node").DeepCopy()
		o.SetAPIVersion("extensions/v1beta1") // removed in Kubernetes 1.16
		_, err := a.apply(ctx, o, true)
		if err == nil || !meta.IsNoMatchError(err) {
			t.Fatalf("apply with apiVersion extensions/v1beta1: err = %v, want no match", err)
		}
		t.Logf("rejected as it should be: %v", err)
	})
	t.Run("rejects an invalid value", func(t *testing.T) {
		o := base.get(t, "Deployment", "airlock-api").DeepCopy()
		c := container(t, o, "airlock")
		// A request above the limit (1Gi).
		if err := unstructured.SetNestedField(c, "2Gi", "resources", "requests", "memory"); err != nil {
			t.Fatal(err)
		}
		setContainer(t, o, c)
		_, err := a.apply(ctx, o, true)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must be less than or equal to memory limit") {
			t.Fatalf("apply with a memory request above its limit: err = %v, want Invalid", err)
		}
		t.Logf("rejected as it should be: %v", err)
	})
}

// checkDefaulted: the objects came back from the API server, defaults filled in.
func checkDefaulted(t *testing.T, m objects) {
	t.Helper()
	for _, name := range []string{"Deployment/airlock-api", "DaemonSet/airlock-node"} {
		o := m[name]
		if o == nil {
			t.Fatalf("no %s returned", name)
		}
		c := container(t, o, "airlock")
		if n, _, _ := unstructured.NestedInt64(c, "readinessProbe", "successThreshold"); n != 1 {
			t.Errorf("%s readinessProbe.successThreshold = %d, want the server's default 1", name, n)
		}
		if p := str(c, "terminationMessagePolicy"); p != "File" {
			t.Errorf("%s terminationMessagePolicy = %q, want the server's default File", name, p)
		}
		if len(o.GetManagedFields()) == 0 || o.GetManagedFields()[0].Manager != fieldManager {
			t.Errorf("%s managedFields = %v, want %s's", name, o.GetManagedFields(), fieldManager)
		}
	}
}

func setContainer(t *testing.T, o *unstructured.Unstructured, c map[string]any) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for i, x := range cs {
		if x.(map[string]any)["name"] == c["name"] {
			cs[i] = c
		}
	}
	if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}
