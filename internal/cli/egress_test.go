package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeEgress records the egress and secret requests the CLI sends.
type fakeEgress struct {
	mu       sync.Mutex
	policies map[string]apiv1.EgressPolicy // sandbox ID → last PUT body
	explains []apiv1.ExplainEgressRequest
	profiles map[string]apiv1.PutEgressProfileRequest
	secrets  map[string]apiv1.PutSecretRequest
	rawPuts  []string // raw bodies of secret PUTs
}

func newFakeEgress(mux *http.ServeMux) *fakeEgress {
	f := &fakeEgress{policies: map[string]apiv1.EgressPolicy{}, profiles: map[string]apiv1.PutEgressProfileRequest{},
		secrets: map[string]apiv1.PutSecretRequest{}}
	mux.HandleFunc("PUT /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		var in apiv1.EgressPolicy
		if !decodeStrictTest(w, r, &in) {
			return
		}
		f.mu.Lock()
		f.policies[r.PathValue("id")] = in
		f.mu.Unlock()
		writeJSON(w, 200, apiv1.SandboxEgress{Policy: in, Effective: in, Live: true})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		p := f.policies[r.PathValue("id")]
		f.mu.Unlock()
		eff := p
		if eff.Default == "" {
			eff.Default = "public"
		}
		writeJSON(w, 200, apiv1.SandboxEgress{Policy: p, Effective: eff})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/egress/explain", func(w http.ResponseWriter, r *http.Request) {
		var in apiv1.ExplainEgressRequest
		if !decodeStrictTest(w, r, &in) {
			return
		}
		f.mu.Lock()
		f.explains = append(f.explains, in)
		f.mu.Unlock()
		writeJSON(w, 200, apiv1.ExplainEgressResponse{Allowed: in.Host == "pypi.org", Rule: "allow pypi.org", Reason: "because"})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/egress/decisions", func(w http.ResponseWriter, r *http.Request) {
		d1 := apiv1.EgressDecision{Seq: 1, Time: fixedTime, Kind: "dns", Host: "pypi.org", Allowed: true, Rule: "allow pypi.org", Reason: "ok"}
		d2 := apiv1.EgressDecision{Seq: 2, Time: fixedTime, Kind: "http", Host: "evil.example", Addr: "203.0.113.5", Port: 80, Rule: "default", Reason: "not allowed"}
		if r.URL.Query().Get("follow") != "true" {
			writeJSON(w, 200, apiv1.EgressDecisionList{Decisions: []apiv1.EgressDecision{d1, d2}, Dropped: 3, Live: true})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		if r.Header.Get("Last-Event-ID") == "" {
			sseEvent(w, 0, apiv1.EventEgressDropped, apiv1.EgressDroppedEventData{Dropped: 5})
			sseEvent(w, 1, apiv1.EventEgressDecision, d1)
			// The stream drops here; the client resumes after 1.
			return
		}
		sseEvent(w, 1, apiv1.EventEgressDecision, d1) // a repeat the client skips
		sseEvent(w, 2, apiv1.EventEgressDecision, d2)
		sseEvent(w, 0, apiv1.EventEgressEnd, struct{}{})
	})
	mux.HandleFunc("PUT /v1/egress-profiles/{name}", func(w http.ResponseWriter, r *http.Request) {
		var in apiv1.PutEgressProfileRequest
		if !decodeStrictTest(w, r, &in) {
			return
		}
		f.mu.Lock()
		f.profiles[r.PathValue("name")] = in
		f.mu.Unlock()
		writeJSON(w, 201, apiv1.EgressProfile{Name: r.PathValue("name"), Allow: in.Allow, Deny: in.Deny, CreatedAt: fixedTime, UpdatedAt: fixedTime})
	})
	mux.HandleFunc("GET /v1/egress-profiles", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := apiv1.EgressProfileList{Profiles: []apiv1.EgressProfile{}}
		for n, p := range f.profiles {
			out.Profiles = append(out.Profiles, apiv1.EgressProfile{Name: n, Allow: p.Allow, UpdatedAt: fixedTime})
		}
		writeJSON(w, 200, out)
	})
	mux.HandleFunc("DELETE /v1/egress-profiles/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 409, apiv1.Error{Code: apiv1.CodeEgressProfileInUse, Message: "in use"})
	})
	mux.HandleFunc("PUT /v1/secrets/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var in apiv1.PutSecretRequest
		if err := json.Unmarshal(b, &in); err != nil {
			writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
			return
		}
		f.mu.Lock()
		f.secrets[r.PathValue("name")] = in
		f.rawPuts = append(f.rawPuts, string(b))
		f.mu.Unlock()
		writeJSON(w, 201, apiv1.Secret{Name: r.PathValue("name"), Hosts: in.Hosts, Header: "Authorization", Format: "Bearer {value}",
			Placeholder: "airlock-secret-" + r.PathValue("name"), CreatedAt: fixedTime, UpdatedAt: fixedTime})
	})
	mux.HandleFunc("GET /v1/secrets", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, apiv1.SecretList{Secrets: []apiv1.Secret{{Name: "tok", Hosts: []string{"api.example.com"}, Header: "Authorization",
			Format: "Bearer {value}", Placeholder: "airlock-secret-tok", CreatedAt: fixedTime, UpdatedAt: fixedTime}}})
	})
	return f
}

func decodeStrictTest(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
		return false
	}
	return true
}

func runCLIStdin(ctx context.Context, f *fakeServer, stdin string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	args = append([]string{"--url", f.srv.URL, "--api-key", "key_test"}, args...)
	code := Run(ctx, Env{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}, args)
	return code, stdout.String(), stderr.String()
}

func TestSandboxCreateEgressFlags(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	code, stdout, stderr := runCLI(ctx, f, "sandbox", "create", "--no-wait", "--allow", "PyPI.org", "--allow", "203.0.113.0/24:22",
		"--deny", "*.evil.example", "--egress-profile", "corp", "--egress-default", "none", "--tls-exempt", "bank.example")
	if code != 0 {
		t.Fatalf("create: %d %s %s", code, stdout, stderr)
	}
	got := f.creates[len(f.creates)-1].Egress
	want := apiv1.EgressPolicy{Default: "none", Allow: []string{"pypi.org", "203.0.113.0/24:22"}, Deny: []string{"*.evil.example"},
		Profiles: []string{"corp"}, TLSExempt: []string{"bank.example"}}
	if got == nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Fatalf("create egress %+v, want %+v", got, want)
	}
	// No egress flag: no egress field (the server's default).
	if code, _, stderr := runCLI(ctx, f, "sandbox", "create", "--no-wait"); code != 0 || f.creates[len(f.creates)-1].Egress != nil {
		t.Fatalf("plain create: %d %s %+v", code, stderr, f.creates[len(f.creates)-1].Egress)
	}
	for _, args := range [][]string{
		{"sandbox", "create", "--allow", "not a host"},
		{"sandbox", "create", "--egress-default", "sometimes"},
		{"sandbox", "create", "--egress-profile", "Bad Name"},
		{"run", "--allow", "x.example:99999", "--", "true"},
	} {
		if code, _, stderr := runCLI(ctx, f, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr)
		}
	}
}

func TestEgressCommands(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	sbx := model.NewSandboxID().String()
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(file, []byte(`{"default": "none", "allow": ["a.example"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(ctx, f, "egress", "set", sbx, "--file", file, "--allow", "b.example:443", "--profile", "corp")
	if code != 0 || !strings.Contains(squash(stdout), "Allow: a.example, b.example:443") || !strings.Contains(stdout, "Live:") {
		t.Fatalf("set: %d\n%s\n%s", code, stdout, stderr)
	}
	got := f.egress.policies[sbx]
	if got.Default != "none" || len(got.Allow) != 2 || got.Profiles[0] != "corp" {
		t.Fatalf("PUT body %+v", got)
	}
	code, stdout, _ = runCLIStdin(ctx, f, `{"deny": ["c.example"]}`, "egress", "set", sbx, "--file", "-")
	if code != 0 || len(f.egress.policies[sbx].Deny) != 1 || len(f.egress.policies[sbx].Allow) != 0 {
		t.Fatalf("set from stdin: %d %+v", code, f.egress.policies[sbx])
	}
	if code, _, _ := runCLIStdin(ctx, f, `{"nope": 1}`, "egress", "set", sbx, "--file", "-"); code != 2 {
		t.Fatalf("unknown field in --file: exit %d, want 2", code)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "egress", "get", sbx)
	var e apiv1.SandboxEgress
	if code != 0 || json.Unmarshal([]byte(stdout), &e) != nil || e.Effective.Default != "public" {
		t.Fatalf("get: %d %s", code, stdout)
	}

	for _, tc := range []struct {
		arg  string
		host string
		port uint16
	}{{"pypi.org", "pypi.org", 443}, {"pypi.org:80", "pypi.org", 80}, {"203.0.113.7:22", "203.0.113.7", 22},
		{"[2001:db8::1]:443", "2001:db8::1", 443}, {"2001:db8::1", "2001:db8::1", 443}, {"pypi.org:0", "pypi.org", 0}} {
		code, stdout, stderr = runCLI(ctx, f, "egress", "explain", sbx, tc.arg)
		last := f.egress.explains[len(f.egress.explains)-1]
		if code != 0 || last.Host != tc.host || last.Port != tc.port {
			t.Fatalf("explain %s: %d %s %s; sent %+v", tc.arg, code, stdout, stderr, last)
		}
	}
	if !strings.Contains(squash(stdout), "Verdict: deny") && !strings.Contains(squash(stdout), "Verdict: allow") {
		t.Fatalf("explain output %s", stdout)
	}
	if code, _, _ := runCLI(ctx, f, "egress", "explain", sbx, "pypi.org:http"); code != 2 {
		t.Fatalf("bad port: exit %d", code)
	}

	code, stdout, _ = runCLI(ctx, f, "egress", "log", sbx)
	if code != 0 || !strings.Contains(stdout, "evil.example") || !strings.Contains(stdout, "3 earlier decisions were dropped") {
		t.Fatalf("log: %d %s", code, stdout)
	}
	// Follow: the first stream drops after seq 1, the second resumes
	// after it (the repeat of 1 is skipped) and ends.
	code, stdout, stderr = runCLI(ctx, f, "egress", "log", sbx, "--follow")
	if code != 0 || strings.Count(stdout, "dns\tpypi.org") != 1 || strings.Count(stdout, "http\tevil.example") != 1 || !strings.Contains(stderr, "5 decisions were dropped") {
		t.Fatalf("log --follow: %d\n%s\n%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(ctx, f, "egress", "profile", "set", "corp", "--allow", "pypi.org", "--deny", "10.0.0.0/8")
	if code != 0 || len(f.egress.profiles["corp"].Allow) != 1 || len(f.egress.profiles["corp"].Deny) != 1 {
		t.Fatalf("profile set: %d %s %s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(ctx, f, "egress", "profile", "list")
	if code != 0 || !strings.Contains(stdout, "corp") {
		t.Fatalf("profile list: %d %s", code, stdout)
	}
	code, _, stderr = runCLI(ctx, f, "egress", "profile", "rm", "corp")
	if code == 0 || !strings.Contains(stderr, "egress_profile_in_use") {
		t.Fatalf("profile rm in use: %d %s", code, stderr)
	}
}

func TestSecretCommands(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	const value = "s3cr3t-from-stdin"
	code, stdout, stderr := runCLIStdin(ctx, f, value+"\n", "secret", "set", "tok", "--host", "api.example.com", "--host", "*.example.org")
	if code != 0 {
		t.Fatalf("set: %d %s %s", code, stdout, stderr)
	}
	if got := f.egress.secrets["tok"]; got.Value != value || len(got.Hosts) != 2 {
		t.Fatalf("PUT body %+v", got)
	}
	if strings.Contains(stdout+stderr, value) {
		t.Fatal("the CLI printed the value")
	}
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(ctx, f, "secret", "set", "tok", "--host", "api.example.com", "--header", "X-Api-Key", "--format", "{value}", "--value-file", file)
	if code != 0 || f.egress.secrets["tok"].Value != "from-file" || f.egress.secrets["tok"].Header != "X-Api-Key" {
		t.Fatalf("set from file: %d %s %+v", code, stderr, f.egress.secrets["tok"])
	}
	// No value: a usage error, nothing sent. There is no flag
	// that takes the value itself.
	n := len(f.egress.rawPuts)
	for _, args := range [][]string{
		{"secret", "set", "tok", "--host", "a.example"},
		{"secret", "set", "tok"},
		{"secret", "set", "tok", "--host", "a.example", "--value", "x"},
	} {
		if code, _, _ := runCLIStdin(ctx, f, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if len(f.egress.rawPuts) != n {
		t.Fatal("a refused set sent a request")
	}
	code, stdout, _ = runCLI(ctx, f, "secret", "list")
	if code != 0 || !strings.Contains(stdout, "airlock-secret-tok") {
		t.Fatalf("list: %d %s", code, stdout)
	}
}

// FuzzParseHostPort: an accepted HOST[:PORT] gives a non-empty host, and
// HOST:PORT built from it parses back to the same.
func FuzzParseHostPort(f *testing.F) {
	for _, s := range []string{"pypi.org", "pypi.org:80", "[::1]:443", "::1", "1.2.3.4:0", "a:b:c", "[x]:1", ":80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := parseHostPort(s)
		if err != nil {
			return
		}
		if host == "" {
			t.Fatalf("%q: empty host", s)
		}
		h2, p2, err := parseHostPort(net.JoinHostPort(host, strconv.Itoa(int(port))))
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("%q → %q %d does not round-trip: %q %d %v", s, host, port, h2, p2, err)
		}
	})
}
