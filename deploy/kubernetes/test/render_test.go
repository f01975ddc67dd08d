package deploytest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// root is deploy/kubernetes, relative to this package's directory.
const root = ".."

// namespace is where the manifests put every namespaced object.
const namespace = "airlock"

// kustomization is one way to deploy: a directory kubectl apply -k takes.
type kustomization struct {
	name string // e.g. overlays/postgres-in-cluster
	fs   filesys.FileSystem
	dir  string // in fs
}

// kustomizations returns base, every overlay, and for each component an
// overlay that adds it to overlays/external-postgres (a component cannot be
// built alone). They are read from a copy of deploy/kubernetes in memory,
// where those extra overlays are written.
func kustomizations(t *testing.T) []kustomization {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	const mem = "/deploy/kubernetes"
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "test" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fs.WriteFile(filepath.Join(mem, rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	ks := []kustomization{{name: "base", fs: fs, dir: mem + "/base"}}
	overlays, err := filepath.Glob(filepath.Join(root, "overlays", "*", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	components, err := filepath.Glob(filepath.Join(root, "components", "*", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(overlays) < 2 || len(components) < 1 {
		t.Fatalf("found %d overlays and %d components under %s; the layout changed?", len(overlays), len(components), root)
	}
	for _, k := range overlays {
		name := "overlays/" + filepath.Base(filepath.Dir(k))
		ks = append(ks, kustomization{name: name, fs: fs, dir: mem + "/" + name})
	}
	for _, k := range components {
		comp := filepath.Base(filepath.Dir(k))
		dir := mem + "/test-overlays/" + comp
		if err := fs.WriteFile(dir+"/kustomization.yaml", []byte(
			"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
				"resources:\n  - ../../overlays/external-postgres\n"+
				"components:\n  - ../../components/"+comp+"\n")); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, kustomization{name: "overlays/external-postgres+components/" + comp, fs: fs, dir: dir})
	}
	return ks
}

// render builds a kustomization as kubectl apply -k would.
func render(t *testing.T, k kustomization) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(k.fs, k.dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", k.name, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize build %s: no objects", k.name)
	}
	return objs
}

// TestRender needs no API server: every kustomization builds, and what it
// builds is what docs/kubernetes.md describes.
func TestRender(t *testing.T) {
	for _, k := range kustomizations(t) {
		t.Run(k.name, func(t *testing.T) {
			objs := render(t, k)
			checkObjects(t, k.name, objs)
		})
	}
}

// TestNoSecretsCommitted: no Secret object and no key file is in the tree;
// the docs say to create them.
func TestNoSecretsCommitted(t *testing.T) {
	var found []string
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		switch filepath.Ext(path) {
		case ".key", ".pem", ".env":
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	if len(found) > 0 {
		t.Errorf("secret-looking files under deploy/kubernetes: %s", strings.Join(found, ", "))
	}
}
