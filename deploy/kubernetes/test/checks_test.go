package deploytest

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// objects indexes a kustomization's objects by kind and name.
type objects map[string]*unstructured.Unstructured

func index(objs []*unstructured.Unstructured) objects {
	m := objects{}
	for _, o := range objs {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

func (m objects) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o, ok := m[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s", kind, name)
	}
	return o
}

// checkObjects checks what the manifests promise (docs/kubernetes.md), on
// kustomize's output or on what the API server returned for it.
func checkObjects(t *testing.T, name string, objs []*unstructured.Unstructured) {
	t.Helper()
	m := index(objs)
	for _, o := range objs {
		switch {
		case o.GetKind() == "Secret":
			t.Errorf("Secret %s is in the manifests; secrets are created by hand (docs/kubernetes.md)", o.GetName())
		case o.GetKind() == "Namespace":
		case o.GetNamespace() != namespace:
			t.Errorf("%s %s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	ns := m.get(t, "Namespace", namespace)
	if got := ns.GetLabels()["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("namespace's pod-security enforce label = %q, want privileged (the node DaemonSet is privileged)", got)
	}
	m.get(t, "ServiceAccount", "airlock")
	m.get(t, "ConfigMap", "airlock-config")

	api := m.get(t, "Deployment", "airlock-api")
	c := container(t, api, "airlock")
	checkCommon(t, api, c, "api")
	if boolean(c, "securityContext", "privileged") {
		t.Error("the API container must not be privileged")
	}
	if !boolean(c, "securityContext", "readOnlyRootFilesystem") {
		t.Error("the API container's root filesystem should be read-only")
	}
	if !slices.Contains(args(c), "--admin-key-file=/etc/airlock/admin/admin.key") {
		t.Errorf("API args %q lack --admin-key-file", args(c))
	}
	// The Host allow-list takes the Service's in-cluster names.
	if !slices.Contains(args(c), "--allowed-hosts=airlock,airlock.$(POD_NAMESPACE),airlock.$(POD_NAMESPACE).svc,airlock.$(POD_NAMESPACE).svc.cluster.local") {
		t.Errorf("API args %q lack --allowed-hosts with the Service's names", args(c))
	}
	if got := envField(t, c, "POD_NAMESPACE"); got != "metadata.namespace" {
		t.Errorf("API: POD_NAMESPACE comes from %q, want the downward API's metadata.namespace", got)
	}
	if _, ok, _ := unstructured.NestedMap(c, "resources", "limits"); !ok {
		t.Error("the API container has no resource limits")
	}

	node := m.get(t, "DaemonSet", "airlock-node")
	c = container(t, node, "airlock")
	checkCommon(t, node, c, "node")
	if !boolean(c, "securityContext", "privileged") {
		t.Error("the node container must be privileged (it runs OCI runtimes and nftables)")
	}
	if !slices.Contains(args(c), "--env=$(AIRLOCK_ENV)") {
		t.Errorf("node args %q lack --env", args(c))
	}
	spec := podSpec(t, node)
	for _, f := range []string{"hostNetwork", "hostPID"} {
		if spec[f] == true {
			t.Errorf("node pods set %s; they need not", f)
		}
	}
	if got := hostPath(t, node, "data"); got != "/var/lib/airlock" {
		t.Errorf("node data volume is hostPath %q, want /var/lib/airlock", got)
	}
	if got := hostPath(t, node, "cgroup"); got != "/sys/fs/cgroup" {
		t.Errorf("node cgroup volume is hostPath %q, want /sys/fs/cgroup", got)
	}
	if mountPath(t, c, "data") != "/var/lib/airlock" || mountPath(t, c, "cgroup") != "/sys/fs/cgroup" {
		t.Error("node container does not mount its data dir and the cgroup filesystem where it should")
	}

	// The Service and the PodDisruptionBudget select the API pods, and only them.
	podLabels, _, _ := unstructured.NestedMap(api.Object, "spec", "template", "metadata", "labels")
	svc := m.get(t, "Service", "airlock")
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	checkSelects(t, "Service airlock", sel, podLabels)
	pdb := m.get(t, "PodDisruptionBudget", "airlock-api")
	sel, _, _ = unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
	checkSelects(t, "PodDisruptionBudget airlock-api", sel, podLabels)

	if strings.Contains(name, "postgres-in-cluster") {
		pg := m.get(t, "StatefulSet", "airlock-postgres")
		pc := container(t, pg, "postgres")
		if img := str(pc, "image"); img != "postgres:17" {
			t.Errorf("postgres image = %q", img)
		}
		if ref := envSecret(t, pc, "POSTGRES_PASSWORD"); ref != "airlock-database/password" {
			t.Errorf("POSTGRES_PASSWORD comes from %q, want airlock-database/password", ref)
		}
		m.get(t, "Service", "airlock-postgres")
	} else if _, ok := m["StatefulSet/airlock-postgres"]; ok {
		t.Errorf("%s has an in-cluster PostgreSQL", name)
	}
	if strings.Contains(name, "s3-blob-store") {
		for _, o := range []*unstructured.Unstructured{api, node} {
			c := container(t, o, "airlock")
			for _, a := range []string{"--blob-store=$(AIRLOCK_BLOB_STORE)", "--trusted-bucket=$(AIRLOCK_BLOB_STORE_BUCKET)", "--blob-store-credentials=/etc/airlock/blob-store/credentials"} {
				if !slices.Contains(args(c), a) {
					t.Errorf("%s args %q lack %s", o.GetName(), args(c), a)
				}
			}
			if ref := envSecret(t, c, "AIRLOCK_BLOB_STORE"); ref != "airlock-blob-store/url" {
				t.Errorf("%s: AIRLOCK_BLOB_STORE comes from %q", o.GetName(), ref)
			}
		}
	}
}

// checkCommon checks what both roles share: the command line, the probes,
// the pod IP in the advertise URL, the keys from Secrets.
func checkCommon(t *testing.T, o *unstructured.Unstructured, c map[string]any, role string) {
	t.Helper()
	if img := str(c, "image"); img != "airlock:dev" {
		t.Errorf("%s image = %q, want airlock:dev", o.GetName(), img)
	}
	a := args(c)
	for _, want := range []string{
		"server", "--role=" + role, "--listen=0.0.0.0:7070", "--advertise-url=http://$(POD_IP):7070",
		"--data-dir=/var/lib/airlock", "--database-url=$(AIRLOCK_DATABASE_URL)",
		"--secrets-key-file=/etc/airlock/secrets/secrets.key",
	} {
		if !slices.Contains(a, want) {
			t.Errorf("%s args %q lack %s", o.GetName(), a, want)
		}
	}
	if got := envField(t, c, "POD_IP"); got != "status.podIP" {
		t.Errorf("%s: POD_IP comes from %q, want the downward API's status.podIP", o.GetName(), got)
	}
	if got := envSecret(t, c, "AIRLOCK_DATABASE_URL"); got != "airlock-database/url" {
		t.Errorf("%s: AIRLOCK_DATABASE_URL comes from %q, want Secret airlock-database key url", o.GetName(), got)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s %s path = %q, want %s", o.GetName(), probe, got, path)
		}
		if got := str(c, probe, "httpGet", "port"); got != "http" {
			t.Errorf("%s %s port = %q, want http", o.GetName(), probe, got)
		}
	}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	if len(ports) != 1 || ports[0].(map[string]any)["containerPort"] != int64(7070) {
		t.Errorf("%s ports = %v, want http 7070", o.GetName(), ports)
	}
	if _, ok, _ := unstructured.NestedMap(c, "resources", "requests"); !ok {
		t.Errorf("%s has no resource requests", o.GetName())
	}
	// The sealing key: a Secret volume of mode 0400 (Airlock refuses a key
	// readable by group or others).
	vol := volume(t, o, "secrets-key")
	if got := str(vol, "secret", "secretName"); got != "airlock-keys" {
		t.Errorf("%s secrets-key volume is Secret %q, want airlock-keys", o.GetName(), got)
	}
	if mode, _, _ := unstructured.NestedInt64(vol, "secret", "defaultMode"); mode != 0o400 {
		t.Errorf("%s secrets-key volume mode = %o, want 400", o.GetName(), mode)
	}
	if mountPath(t, c, "secrets-key") != "/etc/airlock/secrets" {
		t.Errorf("%s does not mount secrets-key at /etc/airlock/secrets", o.GetName())
	}
	if sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName"); sa != "airlock" {
		t.Errorf("%s service account = %q", o.GetName(), sa)
	}
}

func checkSelects(t *testing.T, what string, sel map[string]string, labels map[string]any) {
	t.Helper()
	if len(sel) == 0 || sel["app.kubernetes.io/component"] != "api" {
		t.Errorf("%s selector %v does not pick the API pods only", what, sel)
	}
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("%s selector %s=%s does not match the API pods' labels %v", what, k, v, labels)
		}
	}
}

func podSpec(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, ok, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	if !ok || err != nil {
		t.Fatalf("%s %s: no pod template spec (%v)", o.GetKind(), o.GetName(), err)
	}
	return spec
}

func container(t *testing.T, o *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	t.Fatalf("%s %s has no container %s", o.GetKind(), o.GetName(), name)
	return nil
}

func volume(t *testing.T, o *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	t.Fatalf("%s %s has no volume %s", o.GetKind(), o.GetName(), name)
	return nil
}

func hostPath(t *testing.T, o *unstructured.Unstructured, name string) string {
	t.Helper()
	return str(volume(t, o, name), "hostPath", "path")
}

func mountPath(t *testing.T, c map[string]any, name string) string {
	t.Helper()
	ms, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, m := range ms {
		if m, ok := m.(map[string]any); ok && m["name"] == name {
			return str(m, "mountPath")
		}
	}
	return ""
}

func args(c map[string]any) []string {
	var out []string
	for _, k := range []string{"command", "args"} {
		s, _, _ := unstructured.NestedStringSlice(c, k)
		out = append(out, s...)
	}
	return out
}

func env(t *testing.T, c map[string]any, name string) map[string]any {
	t.Helper()
	es, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range es {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	t.Errorf("container %v has no env %s", c["name"], name)
	return map[string]any{}
}

func envField(t *testing.T, c map[string]any, name string) string {
	t.Helper()
	return str(env(t, c, name), "valueFrom", "fieldRef", "fieldPath")
}

func envSecret(t *testing.T, c map[string]any, name string) string {
	t.Helper()
	e := env(t, c, name)
	return str(e, "valueFrom", "secretKeyRef", "name") + "/" + str(e, "valueFrom", "secretKeyRef", "key")
}

// str returns the string at path, or "" (an int-or-string port is a string here).
func str(m map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(m, path...)
	return s
}

func boolean(m map[string]any, path ...string) bool {
	b, _, _ := unstructured.NestedBool(m, path...)
	return b
}
