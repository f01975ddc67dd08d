package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestCreatePublicPorts: public_ports is set at create, stored, and shown
// (as the OpenAPI document says: the harness validates every exchange);
// absent, a sandbox has none.
func TestCreatePublicPorts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := e.createSandbox(e.keyA, `{"public_ports": true}`).Sandbox
	plain := e.createSandbox(e.keyA, `{}`).Sandbox
	if !pub.PublicPorts || plain.PublicPorts {
		t.Fatalf("create answered public_ports %v and %v, want true and false", pub.PublicPorts, plain.PublicPorts)
	}
	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+pub.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if !got.PublicPorts {
		t.Fatalf("GET: %+v", got)
	}
	for id, want := range map[string]bool{pub.ID: true, plain.ID: false} {
		sb, err := e.st.GetSandboxByID(context.Background(), model.SandboxID(id))
		if err != nil || sb.PublicPorts != want {
			t.Fatalf("stored %s: public ports %v, want %v (%v)", id, sb.PublicPorts, want, err)
		}
	}
}
