package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// volumeFileBodies and volumeFileQueries complete the requests of the
// content routes in the tests that walk every route.
var (
	volumeFileBodies = map[string]string{
		"POST /v1/volumes/{id}/files/mkdir":    `{"path": "/x"}`,
		"POST /v1/volumes/{id}/files/remove":   `{"path": "/x"}`,
		"POST /v1/volumes/{id}/files/move":     `{"from": "/x", "to": "/y"}`,
		"POST /v1/volumes/{id}/files/metadata": `{"path": "/x"}`,
	}
	volumeFileQueries = map[string]string{
		"GET /v1/volumes/{id}/files/stat":    "?path=/",
		"GET /v1/volumes/{id}/files/list":    "?path=/",
		"GET /v1/volumes/{id}/files/content": "?path=/x",
		"PUT /v1/volumes/{id}/files/content": "?path=/x",
	}
)

// everyRouteRequests gives the bodies and queries that make each route's
// request valid, for the tests that try every route with a credential
// that must be refused.
func everyRouteRequests(e *testEnv) (bodies, queries map[string]string) {
	bodies = map[string]string{
		"POST /v1/sandboxes":                                         `{}`,
		"POST /v1/sandboxes/{id}/commands":                           `{"args": ["true"]}`,
		"POST /v1/sandboxes/{id}/timeout":                            `{"timeout": 60}`,
		"POST /v1/templates":                                         fmt.Sprintf(`{"source": %q}`, e.tplDir),
		"POST /v1/admin/projects":                                    `{"name": "evil"}`,
		"POST /v1/admin/keys":                                        fmt.Sprintf(`{"project_id": %q, "role": "admin", "name": "x"}`, e.projA),
		"PUT /v1/admin/projects/{id}/quota":                          `{"sandboxes": 0}`,
		"PUT /v1/sandboxes/{id}/egress":                              `{"default": "none"}`,
		"POST /v1/sandboxes/{id}/egress/explain":                     `{"host": "a.example", "port": 443}`,
		"PUT /v1/egress-profiles/{name}":                             `{"allow": ["a.example"]}`,
		"PUT /v1/secrets/{name}":                                     `{"value": "v", "hosts": ["a.example"]}`,
		"POST /v1/volumes":                                           `{"name": "vol", "size_mib": 64}`,
		"POST /v1/sandboxes/{id}/processes/{process_id}/attachments": `{"actions": ["read"]}`,
		"POST /v1/sandboxes/{id}/processes/{process_id}/signal":      `{"signal": "KILL"}`,
		"POST /v1/sandboxes/{id}/files/mkdir":                        `{"path": "/x"}`,
		"POST /v1/sandboxes/{id}/files/metadata":                     `{"path": "/x", "metadata": {}}`,
		"POST /v1/sandboxes/{id}/files/move":                         `{"from": "/x", "to": "/y"}`,
		"POST /v1/sandboxes/{id}/files/remove":                       `{"path": "/x"}`,
		"POST /v1/sandboxes/{id}/files/transfers":                    `{"path": "/x", "direction": "download"}`,
		"PUT /v1/templates/tags/{name_tag}":                          `{"template": "default"}`,
		"PUT /v1/pools":                                              `{"template": "default", "size": 1}`,
		// Refused at once (400, a reserved metadata key): a fork the
		// harness could make would wait the whole MaxForkWait (2 minutes)
		// for a snapshot no controller here takes. Forks themselves: the
		// integration tests TestSnapshotsAndFork and TestE2BSDK
		// (parity-fork.mjs).
		"POST /v1/sandboxes/{id}/fork": `{"metadata": {"airlock/audit": "x"}}`,
	}
	queries = map[string]string{
		"GET /v1/sandboxes/{id}/files/stat": "?path=/",
		"GET /v1/sandboxes/{id}/files/list": "?path=/",
	}
	maps.Copy(bodies, volumeFileBodies)
	maps.Copy(queries, volumeFileQueries)
	return bodies, queries
}

// walkPath is the path of route rt in the tests that try every route:
// its placeholders filled, {id} an ID of the route's kind (the API key
// keyID, project A, a fresh ID of an operation, build, pool or snapshot,
// this node), volume under /v1/volumes/ (if not ""), else sandbox.
func (e *testEnv) walkPath(rt route, processID string, keyID model.APIKeyID, sandbox, volume string) string {
	path := strings.NewReplacer("{process_id}", processID, "{ref}", "default", "{name_tag}", "x:y", "{name}", "x",
		"{port}", "3000", "{path...}", "x").Replace(rt.pattern)
	id := sandbox
	for prefix, other := range map[string]string{
		"/v1/admin/keys/": keyID.String(), "/v1/admin/projects/": e.projA.String(), "/v1/operations/": model.NewOperationID().String(),
		"/v1/builds/": model.NewBuildID().String(), "/v1/admin/nodes/": testNode.String(), "/v1/pools/": model.NewPoolID().String(),
		"/v1/snapshots/": model.NewSnapshotID().String(), "/v1/volumes/": volume,
	} {
		if strings.HasPrefix(rt.pattern, prefix) && other != "" {
			id = other
		}
	}
	return strings.Replace(path, "{id}", id, 1)
}

// volumeEnv is an env whose volume host keeps content in a directory, with
// a volume "data" of project A.
func volumeEnv(t *testing.T) (*testEnv, *fakeVolumeHost, apiv1.Volume) {
	t.Helper()
	host := &fakeVolumeHost{base: t.TempDir()}
	e := newEnv(t, withVolumes(host, 0))
	var v apiv1.Volume
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "data", "size_mib": 16}`).want(t, http.StatusCreated).decode(t, &v)
	return e, host, v
}

func (e *testEnv) putVolumeFile(t *testing.T, key, vol, path, query, body string) *resp {
	t.Helper()
	return e.send(req{method: "PUT", path: "/v1/volumes/" + vol + "/files/content?path=" + url.QueryEscape(path) + query, key: key, body: body,
		header: http.Header{"Content-Type": {"application/octet-stream"}}})
}

func volumeFilesPath(vol, op, path string) string {
	return "/v1/volumes/" + vol + "/files/" + op + "?path=" + url.QueryEscape(path)
}

// TestVolumeContent: write, read, stat, list, mkdir, move, metadata and
// remove through the content API, by ID and by name; the first call binds
// the volume to the node answering, and every call releases the volume.
func TestVolumeContent(t *testing.T) {
	e, host, v := volumeEnv(t)
	var f apiv1.VolumeFile
	e.putVolumeFile(t, e.keyA, v.ID, "/docs/hello.txt", "&mode=600&uid=1000&gid=1000", "hello volume").want(t, http.StatusCreated).decode(t, &f)
	if f.Path != "/docs/hello.txt" || f.Name != "hello.txt" || f.Type != "file" || f.Size != 12 || f.Mode != 0o600 || f.UID != 1000 || f.GID != 1000 {
		t.Fatalf("written: %+v", f)
	}
	var got apiv1.Volume
	e.do("GET", "/v1/volumes/"+v.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.NodeID != string(testNode) {
		t.Fatalf("the volume is on node %q after a write, want this node %q", got.NodeID, testNode)
	}
	r := e.do("GET", volumeFilesPath("data", "content", "docs/hello.txt"), e.keyA, "").want(t, http.StatusOK)
	if string(r.body) != "hello volume" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read: %q %v", r.body, r.header)
	}
	e.putVolumeFile(t, e.keyA, v.ID, "/docs/hello.txt", "&overwrite=false", "x").wantError(t, http.StatusConflict, apiv1.CodeAlreadyExists)
	e.putVolumeFile(t, e.keyA, v.ID, "/docs/hello.txt", "", "replaced").want(t, http.StatusCreated)
	if r := e.do("GET", volumeFilesPath(v.ID, "content", "/docs/hello.txt"), e.keyA, "").want(t, http.StatusOK); string(r.body) != "replaced" {
		t.Fatalf("after overwrite: %q", r.body)
	}
	e.do("POST", "/v1/volumes/"+v.ID+"/files/mkdir", e.keyA, `{"path": "/a/b/c", "mode": 448}`).want(t, http.StatusOK).decode(t, &f)
	if f.Type != "directory" || f.Mode != 0o700 {
		t.Fatalf("mkdir: %+v", f)
	}
	var list apiv1.VolumeFileList
	e.do("GET", volumeFilesPath(v.ID, "list", "/")+"&depth=3", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	var paths []string
	for _, en := range list.Entries {
		paths = append(paths, en.Path)
	}
	if strings.Join(paths, " ") != "/a /a/b /a/b/c /docs /docs/hello.txt" {
		t.Fatalf("list: %v", paths)
	}
	e.do("POST", "/v1/volumes/"+v.ID+"/files/move", e.keyA, `{"from": "/docs/hello.txt", "to": "/a/moved.txt"}`).want(t, http.StatusOK)
	e.do("POST", "/v1/volumes/"+v.ID+"/files/metadata", e.keyA, `{"path": "/a/moved.txt", "mode": 420, "uid": 7}`).want(t, http.StatusOK).decode(t, &f)
	if f.Mode != 0o644 || f.UID != 7 || f.GID != 0 { // the overwrite made it 0:0
		t.Fatalf("metadata: %+v", f)
	}
	e.do("GET", volumeFilesPath(v.ID, "stat", "/docs/hello.txt"), e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("POST", "/v1/volumes/"+v.ID+"/files/remove", e.keyA, `{"path": "/a"}`).wantError(t, http.StatusConflict, apiv1.CodeDirectoryNotEmpty)
	e.do("POST", "/v1/volumes/"+v.ID+"/files/remove", e.keyA, `{"path": "/a", "recursive": true}`).want(t, http.StatusOK)
	e.do("GET", volumeFilesPath(v.ID, "stat", "/a"), e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("GET", volumeFilesPath(v.ID, "content", "/docs"), e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeIsADirectory)
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.opened[model.VolumeID(v.ID)] != 0 {
		t.Fatalf("%d calls did not release the volume", host.opened[model.VolumeID(v.ID)])
	}
}

// TestVolumeContentBoundaries: the attacker's side. Another project's
// volume does not exist; paths with ".." are refused and symlinks planted
// in the volume (as a sandbox could) do not lead out of it; a body larger
// than the volume is refused before it is read.
func TestVolumeContentBoundaries(t *testing.T) {
	e, host, v := volumeEnv(t)
	e.putVolumeFile(t, e.keyA, v.ID, "/f", "", "mine").want(t, http.StatusCreated)
	// Another project: 404 on every route, nothing bound or written.
	e.do("GET", volumeFilesPath(v.ID, "content", "/f"), e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.putVolumeFile(t, e.keyB, v.ID, "/g", "", "theirs").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("POST", "/v1/volumes/"+v.ID+"/files/remove", e.keyB, `{"path": "/f"}`).wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("GET", volumeFilesPath("data", "list", "/"), e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)

	for _, p := range []string{"../../etc/passwd", "/a/../../x", "/..", "/a//b", "/a\x00b"} {
		e.send(req{method: "GET", path: volumeFilesPath(v.ID, "content", p), key: e.keyA}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidPath)
	}
	e.do("POST", "/v1/volumes/"+v.ID+"/files/move", e.keyA, `{"from": "/f", "to": "/../escaped"}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidPath)
	e.do("POST", "/v1/volumes/"+v.ID+"/files/remove", e.keyA, `{"path": "/", "recursive": true}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidPath)

	// Symlinks a sandbox planted: to the host's files, absolute and relative.
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(host.base, v.ID, "data")
	rel, _ := filepath.Rel(data, outside)
	// "etc" points at itself taken from the volume's root: a loop (400).
	for _, tc := range []struct {
		name, target string
		status       int
		code         string
	}{
		{"abs", outside, http.StatusNotFound, apiv1.CodeNotFound},
		{"rel", rel, http.StatusNotFound, apiv1.CodeNotFound},
		{"etc", "/etc", http.StatusBadRequest, apiv1.CodeInvalidPath},
	} {
		if err := os.Symlink(tc.target, filepath.Join(data, tc.name)); err != nil {
			t.Fatal(err)
		}
		e.do("GET", volumeFilesPath(v.ID, "content", "/"+tc.name+"/secret"), e.keyA, "").wantError(t, tc.status, tc.code)
		e.do("GET", volumeFilesPath(v.ID, "list", "/"+tc.name), e.keyA, "").wantError(t, tc.status, tc.code)
		e.putVolumeFile(t, e.keyA, v.ID, "/"+tc.name+"/planted", "", "x").wantError(t, tc.status, tc.code)
		e.do("POST", "/v1/volumes/"+v.ID+"/files/remove", e.keyA, `{"path": "/`+tc.name+`/secret"}`).wantError(t, tc.status, tc.code)
	}
	if r := e.do("GET", volumeFilesPath(v.ID, "content", "/etc/passwd"), e.keyA, ""); r.status == http.StatusOK {
		t.Fatalf("read the host's /etc/passwd through a symlink: %q", r.body)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "host secret" {
		t.Fatalf("the outside file changed: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a write planted a file outside the volume")
	}

	// Larger than the volume (16 MiB): refused by its Content-Length.
	r := req{method: "PUT", path: volumeFilesPath(v.ID, "content", "/big"), key: e.keyA, body: "x",
		header: http.Header{"Content-Type": {"application/octet-stream"}}}
	hr, _ := http.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(strings.Repeat("x", 17<<20)))
	hr.Header.Set("Authorization", "Bearer "+e.keyA)
	hr.Header.Set("Content-Type", "application/octet-stream")
	res, err := e.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body larger than the volume: %d", res.StatusCode)
	}
	if _, err := os.Lstat(filepath.Join(data, "big")); err == nil {
		t.Fatal("the refused body was written")
	}
}

// TestVolumeContentToken: a volume content token opens its own volume's
// file routes only; forged, another volume's or a deleted volume's
// tokens are refused.
func TestVolumeContentToken(t *testing.T) {
	e, _, v := volumeEnv(t)
	var other apiv1.Volume
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "other", "size_mib": 16}`).want(t, http.StatusCreated).decode(t, &other)
	tok, err := e.ring.Issuer().IssueVolume(auth.VolumeClaims{Volume: model.VolumeID(v.ID), Project: e.projA})
	if err != nil {
		t.Fatal(err)
	}
	e.putVolumeFile(t, tok, v.ID, "/by-token", "", "t").want(t, http.StatusCreated)
	e.do("GET", volumeFilesPath(v.ID, "content", "/by-token"), tok, "").want(t, http.StatusOK)
	// Out of scope: the volume's own record, by name, another volume, sandboxes.
	e.do("GET", "/v1/volumes/"+v.ID, tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("DELETE", "/v1/volumes/"+v.ID, tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("GET", volumeFilesPath("data", "list", "/"), tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("GET", volumeFilesPath(other.ID, "list", "/"), tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("GET", "/v1/sandboxes", tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	// Forged: claims of project B for A's volume, a token signed by another key.
	wrongProject, _ := e.ring.Issuer().IssueVolume(auth.VolumeClaims{Volume: model.VolumeID(v.ID), Project: e.projB})
	e.do("GET", volumeFilesPath(v.ID, "list", "/"), wrongProject, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	otherRing, err := auth.OpenKeyring(t.TempDir(), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := otherRing.Issuer().IssueVolume(auth.VolumeClaims{Volume: model.VolumeID(v.ID), Project: e.projA})
	e.do("GET", volumeFilesPath(v.ID, "list", "/"), forged, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	e.do("GET", volumeFilesPath(v.ID, "list", "/"), tok+"x", "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// A deleted volume's token is dead.
	e.do("DELETE", "/v1/volumes/"+v.ID, e.keyA, "").want(t, http.StatusOK)
	e.do("GET", volumeFilesPath(v.ID, "list", "/"), tok, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
}

// TestVolumeTokenScopeOnEveryRoute: a volume content token is refused
// (403 token_scope) on every route but its own volume's file routes, with
// {id} its own volume's ID wherever there is one, and trying changes
// nothing.
func TestVolumeTokenScopeOnEveryRoute(t *testing.T) {
	e, _, v := volumeEnv(t)
	cs := e.newSession(e.keyA)
	tok, err := e.ring.Issuer().IssueVolume(auth.VolumeClaims{Volume: model.VolumeID(v.ID), Project: e.projA})
	if err != nil {
		t.Fatal(err)
	}
	keyID, _, err := auth.ParseAPIKey(e.keyA)
	if err != nil {
		t.Fatal(err)
	}
	bodies, queries := everyRouteRequests(e)
	before := e.dump()
	n := 0
	for _, rt := range e.api.routes {
		if rt.access.level() == publicAccess || rt.has(volumeToken) {
			continue
		}
		key := rt.method + " " + rt.pattern
		path := e.walkPath(rt, cs.ProcessID, keyID, cs.SandboxID, v.ID)
		t.Run(key, func(t *testing.T) {
			res := e.send(req{method: rt.method, path: path + queries[key], key: tok, body: bodies[key], t: t})
			if rt.method == http.MethodHead {
				res.want(t, http.StatusForbidden)
				return
			}
			res.wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
		})
		n++
	}
	if n < 40 {
		t.Fatalf("only %d routes tried", n)
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestForwardVolumeContent: a content call reaching a replica that keeps
// no volumes is forwarded to the node that holds the volume (with an API
// key or the volume's token); before any node holds it, the replica
// refuses (501) and a node binds it to itself.
func TestForwardVolumeContent(t *testing.T) {
	host := &fakeVolumeHost{base: t.TempDir()}
	c := newCluster(t, func(cfg *Config) { cfg.Volumes = host })
	res, body := c.call(c.a, "POST", "/v1/volumes", c.keyA, `{"name": "shared", "size_mib": 16}`, nil)
	var v apiv1.Volume
	if res.StatusCode != http.StatusCreated || json.Unmarshal(body, &v) != nil {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	octet := http.Header{"Content-Type": {"application/octet-stream"}}
	put := volumeFilesPath(v.ID, "content", "/f.txt")
	if res, body := c.call(c.a, "PUT", put, c.keyA, "data", octet); res.StatusCode != http.StatusNotImplemented || !strings.Contains(string(body), "not_supported") {
		t.Fatalf("write through a replica before any node holds the volume: %d %s", res.StatusCode, body)
	}
	if res, body := c.call(c.b, "PUT", put, c.keyA, "on b", octet); res.StatusCode != http.StatusCreated {
		t.Fatalf("write on node b: %d %s", res.StatusCode, body)
	}
	if got, _ := c.st.GetVolumeByID(context.Background(), model.VolumeID(v.ID)); got.NodeID != c.b.id {
		t.Fatalf("the volume is on %q, want node b %q", got.NodeID, c.b.id)
	}
	tok, err := c.b.ring.Issuer().IssueVolume(auth.VolumeClaims{Volume: model.VolumeID(v.ID), Project: c.projA})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{c.keyA, tok} {
		res, body := c.call(c.a, "GET", put, key, "", nil)
		if res.StatusCode != http.StatusOK || string(body) != "on b" {
			t.Fatalf("read through the replica: %d %q", res.StatusCode, body)
		}
	}
	if res, _ := c.call(c.a, "GET", put, c.keyB, "", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("another project through the replica: %d", res.StatusCode)
	}
}
