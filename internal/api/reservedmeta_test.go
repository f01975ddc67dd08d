package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// TestReservedMetadataRefused: a native create cannot set a metadata key
// the server keeps for itself (e2b.airlock/template-id, which the E2B API
// reports as the sandbox's templateID, or any key under e2b.airlock/ or
// airlock/, case aside), whatever it sends with it; the server's own E2B
// translation, in-process, still can.
func TestReservedMetadataRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, key := range []string{"e2b.airlock/template-id", "E2B.Airlock/template-id", "e2b.airlock/public", "airlock/anything", "AIRLOCK/x"} {
		body := `{"template": "default", "metadata": {"team": "a", "` + key + `": "base"}}`
		// Nothing a client sends over the network marks it as the
		// server's own request.
		hdr := http.Header{"Airlock-In-Process": {"1"}, "X-Airlock-In-Process": {"true"}, "User-Agent": {"airlock-e2b-control"}}
		// Nor does the client's own context: the mark lives only in the
		// context InProcess.RoundTrip makes.
		poisoned := context.WithValue(context.Background(), inProcessKey{}, &inProcessCall{})
		before := e.dump()
		r := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: body, header: hdr, ctx: poisoned, t: t})
		r.wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
		if after := e.dump(); after != before {
			t.Fatalf("a refused create with %q changed the store", key)
		}
	}
	// Keys that merely look alike are anyone's.
	for _, key := range []string{"e2b.airlock", "airlock", "my.airlock/x", "e2b/airlock/x", "airlock.x/y"} {
		out := e.createSandbox(e.keyA, `{"template": "default", "metadata": {"`+key+`": "v"}}`)
		if out.Sandbox.Metadata[key] != "v" {
			t.Fatalf("metadata %q not kept: %+v", key, out.Sandbox.Metadata)
		}
	}
	// The server's own in-process request (the E2B API's create) may.
	status, body, _ := inProcessDo(t, inProcessClient(e.api.InProcess(e.api.Handler())), "POST", "/v1/sandboxes", e.keyA,
		`{"template": "default", "metadata": {"e2b.airlock/template-id": "base"}}`, http.Header{"Content-Type": {"application/json"}})
	var out apiv1.SandboxWithOperation
	if status != http.StatusAccepted || json.Unmarshal(body, &out) != nil || out.Sandbox.Metadata["e2b.airlock/template-id"] != "base" {
		t.Fatalf("in-process create with the reserved key: %d %s", status, body)
	}
}
