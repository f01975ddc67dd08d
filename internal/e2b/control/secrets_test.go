package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// secretsNative is a native secrets API: each API key is its own project.
type secretsNative struct {
	mu      sync.Mutex
	secrets map[string]map[string]apiv1.Secret // key → name → secret
	values  map[string]string                  // key/name → value
	clock   time.Time
}

func (f *secretsNative) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	proj := f.secrets[key]
	if proj == nil {
		proj = map[string]apiv1.Secret{}
		f.secrets[key] = proj
	}
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, code string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: code, Message: code})
	}
	name, one := strings.CutPrefix(r.URL.Path, "/v1/secrets/")
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/secrets":
		out := apiv1.SecretList{Secrets: []apiv1.Secret{}}
		for _, s := range proj {
			out.Secrets = append(out.Secrets, s)
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == "GET" && one:
		s, ok := proj[name]
		if !ok {
			fail(404, apiv1.CodeNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(s)
	case r.Method == "PUT" && one:
		var in apiv1.PutSecretRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		s, exists := proj[name]
		if exists && r.Header.Get("If-None-Match") == "*" {
			fail(409, apiv1.CodeAlreadyExists)
			return
		}
		f.clock = f.clock.Add(time.Second)
		if !exists {
			s = apiv1.Secret{ID: model.SecretIDOf(model.ProjectID(key), name, f.clock).String(), Name: name, CreatedAt: f.clock}
		}
		s.Version++
		s.Hosts, s.Header, s.Format, s.Metadata, s.UpdatedAt = in.Hosts, in.Header, in.Format, in.Metadata, f.clock
		proj[name] = s
		f.values[key+"/"+name] = in.Value
		w.WriteHeader(map[bool]int{true: 200, false: 201}[exists])
		_ = json.NewEncoder(w).Encode(s)
	case r.Method == "DELETE" && one:
		s, ok := proj[name]
		if !ok {
			fail(404, apiv1.CodeNotFound)
			return
		}
		delete(proj, name)
		_ = json.NewEncoder(w).Encode(s)
	default:
		fail(404, apiv1.CodeNotFound)
	}
}

func TestSecretsAPI(t *testing.T) {
	native := &secretsNative{secrets: map[string]map[string]apiv1.Secret{}, values: map[string]string{}, clock: time.Unix(1_700_000_000, 0)}
	h, _ := newTestHandler(t, native)
	call := func(key, method, path, body string) (int, http.Header, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Header(), rec.Body.String()
	}
	var created secretOut
	code, _, body := call("mine", "POST", "/secrets", `{"name":"OpenAI-Key","value":"sk-1","metadata":{"env":"test"}}`)
	if code != 201 || json.Unmarshal([]byte(body), &created) != nil || !strings.HasPrefix(created.SecretID, "sec_") ||
		created.Name != "openai-key" || created.CurrentVersion != 1 || created.Metadata["env"] != "test" || strings.Contains(body, "sk-1") {
		t.Fatalf("create: %d %s", code, body)
	}
	if len(native.secrets["mine"]["openai-key"].Hosts) != 0 {
		t.Fatal("an E2B secret got hosts")
	}
	if code, _, body := call("mine", "POST", "/secrets", `{"name":"openai-key","value":"sk-2"}`); code != 409 {
		t.Fatalf("create a taken name: %d %s", code, body)
	}
	for _, bad := range []string{`{"name":"sec_x","value":"v"}`, `{"name":"","value":"v"}`, `{"name":"k"}`} {
		if code, _, body := call("mine", "POST", "/secrets", bad); code != 400 {
			t.Fatalf("create %s: %d %s", bad, code, body)
		}
	}
	// By ID and by name (any case).
	for _, sel := range []string{created.SecretID, "openai-key", "OPENAI-KEY"} {
		var got secretOut
		if code, _, body := call("mine", "GET", "/secrets/"+sel, ""); code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.SecretID != created.SecretID {
			t.Fatalf("get %s: %d %s", sel, code, body)
		}
	}
	// Another project's secret, by ID or name, and names no secret can have: 404.
	for _, sel := range []string{created.SecretID, "openai-key", "no.such", "missing"} {
		if code, _, body := call("theirs", "GET", "/secrets/"+sel, ""); code != 404 || !strings.Contains(body, `"code":404`) {
			t.Fatalf("their get %s: %d %s", sel, code, body)
		}
	}
	if code, _, _ := call("theirs", "POST", "/secrets/"+created.SecretID, `{"value":"stolen"}`); code != 404 {
		t.Fatalf("their update: %d", code)
	}
	if code, _, _ := call("theirs", "DELETE", "/secrets/openai-key", ""); code != 404 {
		t.Fatalf("their delete: %d", code)
	}
	// Update: a new version, metadata kept unless given, hosts kept.
	native.secrets["mine"]["openai-key"] = func(s apiv1.Secret) apiv1.Secret { s.Hosts = []string{"api.example.com"}; return s }(native.secrets["mine"]["openai-key"])
	var upd secretOut
	if code, _, body := call("mine", "POST", "/secrets/"+created.SecretID, `{"value":"sk-2"}`); code != 200 || json.Unmarshal([]byte(body), &upd) != nil ||
		upd.CurrentVersion != 2 || upd.SecretID != created.SecretID || upd.Metadata["env"] != "test" {
		t.Fatalf("update: %d %s", code, body)
	}
	if s := native.secrets["mine"]["openai-key"]; len(s.Hosts) != 1 || native.values["mine/openai-key"] != "sk-2" {
		t.Fatalf("update lost the hosts or the value: %+v", s)
	}
	if code, _, body := call("mine", "POST", "/secrets/openai-key", `{"value":"sk-3","metadata":{"env":"prod"}}`); code != 200 || !strings.Contains(body, `"env":"prod"`) {
		t.Fatalf("update with metadata: %d %s", code, body)
	}
	// List, paged.
	for _, n := range []string{"key-a", "key-b", "key-c"} {
		if code, _, body := call("mine", "POST", "/secrets", `{"name":"`+n+`","value":"v"}`); code != 201 {
			t.Fatalf("create %s: %d %s", n, code, body)
		}
	}
	var names []string
	next := ""
	for page := 0; ; page++ {
		path := "/secrets?limit=3"
		if next != "" {
			path += "&nextToken=" + next
		}
		code, hdr, body := call("mine", "GET", path, "")
		var got []secretOut
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		for _, s := range got {
			names = append(names, s.Name)
		}
		if next = hdr.Get("X-Next-Token"); next == "" {
			break
		}
		if page > 3 {
			t.Fatal("the listing does not end")
		}
	}
	if strings.Join(names, ",") != "key-a,key-b,key-c,openai-key" {
		t.Fatalf("listed %v", names)
	}
	if code, _, _ := call("mine", "GET", "/secrets?nextToken=!!!", ""); code != 400 {
		t.Fatalf("bad token: %d", code)
	}
	// Delete: 204, then 404.
	if code, _, body := call("mine", "DELETE", "/secrets/"+created.SecretID, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _, _ := call("mine", "DELETE", "/secrets/"+created.SecretID, ""); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
}
