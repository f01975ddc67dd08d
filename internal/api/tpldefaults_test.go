package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// A command that names no cwd or user gets its template's; the stored
// session says what runs. A template user that cannot be resolved fails
// only the commands that name no user, with a clear error.
func TestCommandTemplateDefaults(t *testing.T) {
	t.Parallel()
	def := guestops.Defaults{Cwd: "/work", User: &model.UserIDs{UID: 1234, GID: 50}}
	e := newEnv(t, func(c *envConfig) {
		c.TemplateDefaults = func(model.TemplateDigest) (guestops.Defaults, error) { return def, nil }
	})
	sb := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	e.finishCreate(model.SandboxID(sb))
	stored := func(body string) model.ProcessSpec {
		t.Helper()
		var cs apiv1.CommandSession
		e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, body).want(t, http.StatusCreated).decode(t, &cs)
		got, err := e.st.GetCommandSessionByProcess(context.Background(), model.ProcessID(cs.ProcessID))
		if err != nil {
			t.Fatal(err)
		}
		return got.Spec
	}
	if s := stored(`{"args": ["pwd"]}`); s.Cwd != "/work" || s.User == nil || *s.User != (model.UserIDs{UID: 1234, GID: 50}) {
		t.Errorf("command without cwd/user: cwd %q user %v", s.Cwd, s.User)
	}
	if s := stored(`{"args": ["pwd"], "cwd": "/", "user": {"uid": 0, "gid": 0}}`); s.Cwd != "/" || s.User == nil || *s.User != (model.UserIDs{}) {
		t.Errorf("command with its own cwd/user: cwd %q user %v", s.Cwd, s.User)
	}

	// No args: the template's default command (entrypoint + cmd); args
	// replace it whole. A template without one refuses a command without args.
	def.Command = []string{"/entry", "--flag", "cmd-arg"}
	if s := stored(`{}`); !slices.Equal(s.Args, def.Command) {
		t.Errorf("command without args runs %q, want the template's %q", s.Args, def.Command)
	}
	if s := stored(`{"args": ["echo", "hi"]}`); !slices.Equal(s.Args, []string{"echo", "hi"}) {
		t.Errorf("command with args runs %q", s.Args)
	}
	def.Command = nil
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": []}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	def.Command = []string{"", "x"}
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	def = guestops.Defaults{Cwd: "/work", UserErr: errors.New(`the template's user "ghost": no such user in the template's /etc/passwd`)}
	r := e.do("POST", "/v1/sandboxes/"+sb+"/commands", e.keyA, `{"args": ["pwd"]}`)
	r.wantError(t, http.StatusBadRequest, apiv1.CodeExecFailed)
	if s := stored(`{"args": ["pwd"], "user": {"uid": 5, "gid": 5}}`); s.Cwd != "/work" || s.User == nil || s.User.UID != 5 {
		t.Errorf("command with its own user on a template with a bad user: cwd %q user %v", s.Cwd, s.User)
	}
}
