package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/model"
)

// TestEgressHeaderRules: a sandbox's header rules are stored sealed in its
// policy (the database never holds a value), shown by host and header
// name only, replaced with the policy (live), and bad or oversized rules
// are refused with 400 before anything is stored.
func TestEgressHeaderRules(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	e := newEnv(t, withEgress(reg), withSecrets(t))
	const value = "static-credential-4711"
	created := e.createSandbox(e.keyA, `{"egress": {"headers": [{"host": "api.example.com", "headers": {"X-Token": "`+value+`", "Authorization": "Bearer ${secrets.openai}"}}]}}`)
	id := created.Sandbox.ID
	var got apiv1.SandboxEgress
	e.do("GET", "/v1/sandboxes/"+id+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if len(got.Policy.Headers) != 1 || got.Policy.Headers[0].Host != "api.example.com" || strings.Join(got.Policy.Headers[0].Names, ",") != "Authorization,X-Token" || got.Policy.Headers[0].Headers != nil {
		t.Fatalf("policy headers %+v", got.Policy.Headers)
	}
	if got.Effective.Default != "public" {
		t.Fatalf("rules alone changed the default: %+v", got.Effective)
	}
	if strings.Contains(e.dump(), value) {
		t.Fatal("the store holds a header rule's value in clear")
	}
	var stored string
	if err := e.st.DB().QueryRow(`SELECT egress FROM sandboxes WHERE id = ?`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, value) || !strings.Contains(stored, "sealed_headers") {
		t.Fatalf("stored policy %s", stored)
	}

	// Refused: nothing stored, the rules stay.
	for _, body := range []string{
		`{"headers": [{"host": "api.example.com", "headers": {"X-Token": "v\r\nX-Evil: 1"}}]}`,
		`{"headers": [{"host": "api.example.com", "headers": {"Host": "evil.example"}}]}`,
		`{"headers": [{"host": "*.com", "headers": {"X": "1"}}]}`,
		`{"headers": [{"host": "api.example.com", "headers": {"X": "` + strings.Repeat("v", 9000) + `"}}]}`,
		`{"headers": [{"host": "api.example.com", "headers": {"X": "${secrets.unterminated"}}]}`,
		`{"headers": [{"host": "api.example.com", "names": ["X"]}]}`,
	} {
		e.send(req{method: "PUT", path: "/v1/sandboxes/" + id + "/egress", key: e.keyA, body: body, invalid: strings.Contains(body, "vvvv")}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyB, `{"headers": [{"host": "a.example", "headers": {"X": "1"}}]}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("GET", "/v1/sandboxes/"+id+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if len(got.Policy.Headers) != 1 || len(got.Policy.Headers[0].Names) != 2 {
		t.Fatalf("a refused PUT changed the rules: %+v", got.Policy.Headers)
	}

	// Replaced live: the running sandbox's policy carries the new rules.
	live := e.register(reg, id, "10.213.0.9")
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyA, `{"headers": [{"host": "other.example.com", "headers": {"X-New": "n"}}]}`).want(t, http.StatusOK)
	h := live.Policy().Spec().Headers
	if h == nil || len(h.Hosts) != 1 || h.Hosts[0].Host != "other.example.com" {
		t.Fatalf("live rules %+v", h)
	}
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyA, `{}`).want(t, http.StatusOK)
	if live.Policy().Spec().Headers != nil {
		t.Fatal("a PUT without headers left the rules")
	}
	reg.Remove(model.SandboxID(id))
}

func TestEgressHeaderRulesNeedAKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: `{"egress": {"headers": [{"host": "a.example.com", "headers": {"X": "1"}}]}}`}).
		wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
}

// TestSecretsCreateOnlyMetadataVersion: If-None-Match: * only creates
// (another project's secret of the name is no obstacle), metadata and the
// version come back, the ID stays while the secret does, and a secret
// without hosts is accepted.
func TestSecretsCreateOnlyMetadataVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withSecrets(t))
	createOnly := http.Header{"If-None-Match": {"*"}}
	var first, again apiv1.Secret
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyA, header: createOnly, body: `{"value": "v1", "metadata": {"env": "test"}}`}).
		want(t, http.StatusCreated).decode(t, &first)
	if !strings.HasPrefix(first.ID, "sec_") || first.Version != 1 || first.Metadata["env"] != "test" || len(first.Hosts) != 0 {
		t.Fatalf("created %+v", first)
	}
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyA, header: createOnly, body: `{"value": "v2"}`}).
		wantError(t, http.StatusConflict, apiv1.CodeAlreadyExists)
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyB, header: createOnly, body: `{"value": "theirs"}`}).want(t, http.StatusCreated)
	e.do("PUT", "/v1/secrets/tok", e.keyA, `{"value": "v2", "metadata": {"env": "prod"}}`).want(t, http.StatusOK).decode(t, &again)
	if again.ID != first.ID || again.Version != 2 || again.Metadata["env"] != "prod" {
		t.Fatalf("replaced %+v (first %+v)", again, first)
	}
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyA, header: http.Header{"If-None-Match": {`"x"`}}, body: `{"value": "v3"}`, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyA, body: `{"value": "v3", "metadata": {"": "x"}}`}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("DELETE", "/v1/secrets/tok", e.keyA, "").want(t, http.StatusOK)
	e.send(req{method: "PUT", path: "/v1/secrets/tok", key: e.keyA, header: createOnly, body: `{"value": "v1"}`}).want(t, http.StatusCreated).decode(t, &again)
	if again.Version != 1 {
		t.Fatalf("created again %+v", again)
	}
}
