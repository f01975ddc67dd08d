package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeSnapshots is a native API of two projects (keys "k" and "other"):
// one running sandbox of "k", its saved snapshots and forks. Operations
// succeed, except the create of a fork whose index is in failFork.
type fakeSnapshots struct {
	mu       sync.Mutex
	src      model.SandboxID
	snaps    []apiv1.SavedSnapshot // of "k"
	ops      map[string]apiv1.Operation
	forkReq  apiv1.ForkRequest
	failFork map[int]bool
	timeouts map[string]apiv1.SetTimeoutRequest
	deleted  []string
	calls    []string
}

func (f *fakeSnapshots) op(kind, sbx string, fail bool) apiv1.Operation {
	op := apiv1.Operation{ID: model.NewOperationID().String(), Kind: kind, SandboxID: sbx, State: "succeeded"}
	if fail {
		op.State = "failed"
		op.Error = &apiv1.Error{Code: apiv1.CodeSnapshotNotReady, Message: "restore failed"}
	}
	f.ops[op.ID] = op
	return op
}

func (f *fakeSnapshots) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	mine := r.Header.Get("Authorization") == "Bearer k"
	reply := func(status int, v any) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	notFound := func(code string) { reply(404, apiv1.Error{Code: code, Message: "not found"}) }
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/v1/operations/"):
		reply(200, f.ops[strings.TrimPrefix(path, "/v1/operations/")])
	case r.Method == "GET" && strings.HasPrefix(path, "/v1/sandboxes/"):
		id := strings.TrimPrefix(path, "/v1/sandboxes/")
		if !mine || (id != f.src.String() && f.timeouts[id].Timeout == 0) {
			notFound(apiv1.CodeNotFound)
			return
		}
		reply(200, apiv1.Sandbox{ID: id, State: "running", Metadata: map[string]string{templateKey: "base"}})
	case r.Method == "POST" && strings.HasSuffix(path, "/snapshots"):
		var in apiv1.SnapshotRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		s := apiv1.SavedSnapshot{ID: model.NewSnapshotID().String(), Name: in.Name, State: "ready", SourceSandboxID: f.src.String()}
		f.snaps = append(f.snaps, s)
		reply(202, apiv1.SnapshotWithOperation{Snapshot: s, Operation: f.op("snapshot", f.src.String(), false)})
	case r.Method == "POST" && strings.HasSuffix(path, "/fork"):
		_ = json.NewDecoder(r.Body).Decode(&f.forkReq)
		var out apiv1.ForkResult
		for i := range f.forkReq.Count {
			id := model.NewSandboxID().String()
			out.Sandboxes = append(out.Sandboxes, apiv1.SandboxWithOperation{Sandbox: apiv1.Sandbox{ID: id}, Operation: f.op("create", id, f.failFork[i])})
		}
		reply(202, out)
	case r.Method == "POST" && strings.HasSuffix(path, "/timeout"):
		var in apiv1.SetTimeoutRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.timeouts[strings.Split(path, "/")[3]] = in
		reply(200, apiv1.Sandbox{})
	case r.Method == "DELETE" && strings.HasPrefix(path, "/v1/sandboxes/"):
		f.deleted = append(f.deleted, strings.TrimPrefix(path, "/v1/sandboxes/"))
		reply(202, apiv1.SandboxWithOperation{})
	case path == "/v1/snapshots":
		l := apiv1.SnapshotList{Snapshots: []apiv1.SavedSnapshot{}}
		for _, s := range f.snaps {
			if mine && (r.URL.Query().Get("name") == "" || r.URL.Query().Get("name") == s.Name) {
				l.Snapshots = append(l.Snapshots, s)
			}
		}
		reply(200, l)
	case strings.HasPrefix(path, "/v1/snapshots/"):
		id := strings.TrimPrefix(path, "/v1/snapshots/")
		for i, s := range f.snaps {
			if s.ID != id || !mine {
				continue
			}
			if r.Method == "DELETE" {
				f.snaps[i].State = "deleting"
			}
			reply(200, f.snaps[i])
			return
		}
		notFound(apiv1.CodeSnapshotNotFound)
	default:
		reply(500, apiv1.Error{Code: "internal", Message: "unexpected " + r.Method + " " + path})
	}
}

func TestSnapshotsAndFork(t *testing.T) {
	f := &fakeSnapshots{src: model.NewSandboxID(), ops: map[string]apiv1.Operation{}, failFork: map[int]bool{1: true}, timeouts: map[string]apiv1.SetTimeoutRequest{}}
	h, _ := newTestHandler(t, f)
	do := func(key, method, path, body string, status int) []byte {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != status {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, status, rec.Body)
		}
		return rec.Body.Bytes()
	}
	src := "/sandboxes/" + f.src.String()

	var info snapshotInfoOut
	if err := json.Unmarshal(do("k", "POST", src+"/snapshots", `{}`, 201), &info); err != nil || info.SnapshotID != f.snaps[0].ID || info.Names == nil {
		t.Fatalf("createSnapshot = %+v, %v", info, err)
	}
	do("k", "POST", src+"/snapshots", `{"name":"../x"}`, 400)
	do("other", "POST", src+"/snapshots", `{}`, 404) // another project's sandbox
	do("k", "POST", "/sandboxes/"+model.NewSandboxID().String()+"/snapshots", `{}`, 404)

	list := func(key, query string) []snapshotInfoOut {
		t.Helper()
		var out []snapshotInfoOut
		if err := json.Unmarshal(do(key, "GET", "/snapshots"+query, "", 200), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if l := list("k", ""); len(l) != 1 || l[0].SnapshotID != info.SnapshotID {
		t.Fatalf("list = %+v", l)
	}
	for _, q := range []string{"?sandboxID=" + f.src.String(), "?name=" + info.SnapshotID, "?name=" + info.SnapshotID + snapshotTag} {
		if l := list("k", q); len(l) != 1 {
			t.Fatalf("list%s = %+v", q, l)
		}
	}
	for _, q := range []string{"?sandboxID=sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "?name=mine", "?name=" + info.SnapshotID + "-x"} {
		if l := list("k", q); len(l) != 0 {
			t.Fatalf("list%s = %+v", q, l)
		}
	}
	if l := list("other", ""); len(l) != 0 {
		t.Fatalf("another project lists %+v", l)
	}
	do("k", "GET", "/snapshots?nextToken=../x", "", 400)

	// Named: names holds the name; the listing finds it by name, as E2B
	// qualifies it or not.
	var named snapshotInfoOut
	if err := json.Unmarshal(do("k", "POST", src+"/snapshots", `{"name":"snap-1"}`, 201), &named); err != nil ||
		len(named.Names) != 1 || named.Names[0] != "snap-1" || named.SnapshotID == info.SnapshotID {
		t.Fatalf("named createSnapshot = %+v, %v", named, err)
	}
	for _, q := range []string{"snap-1", "team%2Fsnap-1", "snap-1:default"} {
		if l := list("k", "?name="+q); len(l) != 1 || l[0].SnapshotID != named.SnapshotID {
			t.Fatalf("list ?name=%s = %+v", q, l)
		}
	}
	for _, q := range []string{"snap-1:v2", "snap-2", "-x", "a:b:c"} {
		if l := list("k", "?name="+q); len(l) != 0 {
			t.Fatalf("list ?name=%s = %+v", q, l)
		}
	}
	if l := list("other", "?name=snap-1"); len(l) != 0 {
		t.Fatalf("another project lists %+v", l)
	}

	// Paging: three snapshots by now, one per page.
	do("k", "POST", src+"/snapshots", `{}`, 201)
	var seen []string
	token := ""
	for range 4 {
		req := httptest.NewRequest("GET", "/snapshots?limit=1&nextToken="+token, nil)
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var page []snapshotInfoOut
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || len(page) != 1 {
			t.Fatalf("page %q = %s", token, rec.Body)
		}
		seen = append(seen, page[0].SnapshotID)
		if token = rec.Header().Get("X-Next-Token"); token == "" {
			break
		}
	}
	if len(seen) != 3 || seen[0] == seen[1] || seen[1] == seen[2] {
		t.Fatalf("pages = %v", seen)
	}

	// Another project's snapshot is not found, and stays.
	do("other", "DELETE", "/templates/"+info.SnapshotID, "", 404)
	if f.snaps[0].State != "ready" {
		t.Fatalf("another project deleted it: %+v", f.snaps[0])
	}
	do("k", "DELETE", "/templates/"+info.SnapshotID, "", 204)
	do("k", "DELETE", "/templates/"+info.SnapshotID, "", 404) // already deleting: E2B's second delete is false
	do("k", "DELETE", "/templates/snp_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", 404)

	// fork: count 2, the second fails to start; each answers on its own.
	var res []forkResultOut
	if err := json.Unmarshal(do("k", "POST", src+"/fork", `{"count":2,"timeout":60}`, 201), &res); err != nil || len(res) != 2 {
		t.Fatalf("fork = %+v, %v", res, err)
	}
	if res[0].Sandbox == nil || res[0].Error != nil || res[0].Sandbox.TemplateID != "base" || res[0].Sandbox.EnvdAccessToken == "" {
		t.Fatalf("fork 0 = %+v", res[0])
	}
	if res[1].Sandbox != nil || res[1].Error == nil || res[1].Error.Code < 400 || !strings.Contains(res[1].Error.Message, "restore failed") {
		t.Fatalf("fork 1 = %+v", res[1])
	}
	if f.forkReq.Count != 2 || f.forkReq.Metadata[templateKey] != "base" {
		t.Fatalf("native fork request %+v", f.forkReq)
	}
	if to := f.timeouts[res[0].Sandbox.SandboxID]; to.Timeout != 60 || to.OnTimeout != "delete" {
		t.Fatalf("fork timeout %+v", to)
	}
	if len(f.deleted) != 1 || f.deleted[0] == res[0].Sandbox.SandboxID {
		t.Fatalf("deleted %v, want the failed fork only", f.deleted)
	}

	// Refused before the native API: counts out of bounds, bad bodies.
	n := len(f.calls)
	do("k", "POST", src+"/fork", `{"count":0}`, 400)
	do("k", "POST", src+"/fork", `{"count":17}`, 400)
	do("k", "POST", src+"/fork", `{"timeout":-1}`, 400)
	do("k", "POST", "/sandboxes/nope/fork", `{}`, 404)
	if len(f.calls) != n {
		t.Fatalf("refused requests reached the native API: %v", f.calls[n:])
	}
	do("other", "POST", src+"/fork", `{}`, 404) // another project's sandbox
}

func TestCreateFromSnapshot(t *testing.T) {
	id := model.NewSnapshotID().String()
	for _, tpl := range []string{id, id + snapshotTag} {
		s, err := parseCreate(createIn{TemplateID: tpl})
		if err != nil || s.native.Snapshot != id || s.native.Template != "" || s.native.Metadata[templateKey] != tpl {
			t.Fatalf("parseCreate(%q) = %+v, %v", tpl, s.native, err)
		}
	}
	for _, tpl := range []string{"snp_x", "base", "snp_aaaaaaaaaaaaaaaaaaaaaaaaaa:v2"} {
		s, err := parseCreate(createIn{TemplateID: tpl})
		if err != nil || s.native.Snapshot != "" {
			t.Fatalf("parseCreate(%q) = %+v, %v", tpl, s.native, err)
		}
	}
}
