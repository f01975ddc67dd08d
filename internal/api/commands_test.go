package api

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

func TestCreateCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{"env": {"BASE": "1"}}`).Sandbox.ID
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["true"]}`).
		wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
	e.finishCreate(model.SandboxID(sb))

	var cs apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["sh", "-c", "echo $X"], "env": {"X": "y"}, "cwd": "/tmp"}`).
		want(t, http.StatusCreated).decode(t, &cs)
	if cs.SandboxID != sb {
		t.Fatalf("session of %s, want %s", cs.SandboxID, sb)
	}
	if want := e.srv.URL + "/data/v1/processes/" + cs.ProcessID + "/attach"; cs.AttachURL != want {
		t.Fatalf("attach_url %q, want %q", cs.AttachURL, want)
	}
	if auth.KindOf(cs.AttachmentToken) != auth.KindAttachment {
		t.Fatalf("token %q is not an attachment token", cs.AttachmentToken)
	}
	// The clock advances 1 ms per reading; the TTL is the default 120 s.
	if d := cs.ExpiresAt.Sub(e.clock.Now()); d < 119*time.Second || d > 120*time.Second {
		t.Fatalf("expires in %s, want about 120s", d)
	}

	stored, err := e.st.GetCommandSessionByProcess(context.Background(), model.ProcessID(cs.ProcessID))
	if err != nil {
		t.Fatal(err)
	}
	claims, err := e.ring.Verifier().Verify(cs.AttachmentToken, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if claims.Session.String() != cs.ID || claims.Sandbox.String() != sb || claims.Process.String() != cs.ProcessID ||
		!slices.Equal(claims.Actions, auth.AllActions()) || !claims.ExpiresAt.Equal(cs.ExpiresAt) {
		t.Fatalf("token claims %+v do not match the session %+v", claims, cs)
	}
	if !bytes.Equal(stored.TokenHash, auth.HashSecret([]byte(cs.AttachmentToken))) {
		t.Fatal("the stored hash is not the hash of the issued token")
	}
	if stored.ID.String() != cs.ID || stored.ProjectID != e.projA || stored.SandboxID.String() != sb ||
		strings.Join(stored.Spec.Args, " ") != "sh -c echo $X" || stored.Spec.Env["X"] != "y" || stored.Spec.Cwd != "/tmp" ||
		!stored.ExpiresAt.Equal(cs.ExpiresAt) || stored.AttachedAt != nil {
		t.Fatalf("stored session %+v does not match %+v", stored, cs)
	}
	if strings.Contains(e.dump(), cs.AttachmentToken[len(cs.AttachmentToken)-40:]) {
		t.Fatal("the database holds the attachment token")
	}

	// Each session gets its own process and token.
	var cs2 apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["true"]}`).want(t, http.StatusCreated).decode(t, &cs2)
	if cs2.ProcessID == cs.ProcessID || cs2.AttachmentToken == cs.AttachmentToken || cs2.ID == cs.ID {
		t.Fatal("two sessions share an ID or token")
	}

	// The attachment token is refused by the management API.
	e.do("GET", "/v1/sandboxes/"+sb, cs.AttachmentToken, "").wantError(t, http.StatusUnauthorized, apiv1.CodeWrongTokenKind)

	// A deleting sandbox takes no commands.
	e.do("DELETE", "/v1/sandboxes/"+sb, e.keyA, "").want(t, http.StatusAccepted)
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["true"]}`).
		wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
}

func TestAttachURLFromConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.PublicURL = "https://airlock.example:8443/"; c.AttachTTL = 10 * time.Second })
	sb := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	e.finishCreate(model.SandboxID(sb))
	var cs apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["true"]}`).want(t, http.StatusCreated).decode(t, &cs)
	if want := "https://airlock.example:8443/data/v1/processes/" + cs.ProcessID + "/attach"; cs.AttachURL != want {
		t.Fatalf("attach_url %q, want %q", cs.AttachURL, want)
	}
	if d := cs.ExpiresAt.Sub(e.clock.Now()); d > 10*time.Second || d < 9*time.Second {
		t.Fatalf("expires in %s, want about 10s", d)
	}
}
