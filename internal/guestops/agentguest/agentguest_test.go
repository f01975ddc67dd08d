package agentguest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// The agent is asked to run what the stored spec says: "/" for a command
// with no working directory, the spec's user, terminal, env and timeout.
func TestStartRequest(t *testing.T) {
	cs := model.CommandSession{ProcessID: model.NewProcessID(), Spec: model.ProcessSpec{
		Args: []string{"sh", "-c", "true"}, Env: model.Env{"A": "1"}, Stdin: true,
		PTY: &model.TermSize{Rows: 24, Cols: 80}, User: &model.UserIDs{UID: 1234, GID: 50}, Timeout: 3 * time.Second,
	}}
	req := StartRequest(cs)
	if req.ID != cs.ProcessID.String() || !slices.Equal(req.Args, cs.Spec.Args) || !slices.Equal(req.Env, []string{"A=1"}) ||
		req.Cwd != "/" || !req.Stdin || req.TimeoutMillis != 3000 || req.HoldOutput {
		t.Errorf("StartRequest = %+v", req)
	}
	if req.PTY == nil || *req.PTY != (agentproto.WindowSize{Rows: 24, Cols: 80}) {
		t.Errorf("PTY = %+v", req.PTY)
	}
	if req.User == nil || req.User.UID != 1234 || req.User.GID != 50 {
		t.Errorf("User = %+v", req.User)
	}
	cs.Spec.Cwd, cs.Spec.User, cs.Spec.PTY = "/work", nil, nil
	if req := StartRequest(cs); req.Cwd != "/work" || req.User != nil || req.PTY != nil {
		t.Errorf("StartRequest = %+v", req)
	}
}

// Only mapped codes pass; transport errors of process calls never show
// their text; an error already mapped stays as it is.
func TestPublicError(t *testing.T) {
	mapped := &guestops.Error{Status: http.StatusTeapot, Code: "x", Message: "y"}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("sandbox x: %w", guestops.ErrSandboxGone), http.StatusConflict, apiv1.CodeSandboxNotRunning},
		{guestops.ErrEnvironmentNotEnabled, http.StatusConflict, apiv1.CodeEnvironmentUnavailable},
		{fmt.Errorf("wait: %w", agentclient.ErrUnsupported), http.StatusNotImplemented, apiv1.CodeAgentUnsupported},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, apiv1.CodeUnavailable},
		{errors.New("dial unix /var/lib/airlock/secret.sock: refused"), http.StatusServiceUnavailable, apiv1.CodeUnavailable},
		{&agentclient.Error{Code: agentproto.CodeNotFound}, http.StatusNotFound, apiv1.CodeProcessNotFound},
		{&agentclient.Error{Code: "made-up", Message: "guest says"}, http.StatusInternalServerError, apiv1.CodeInternal},
		{fmt.Errorf("wrapped: %w", mapped), http.StatusTeapot, "x"},
	} {
		pe := PublicError(c.err)
		if pe.Status != c.status || pe.Code != c.code {
			t.Errorf("PublicError(%v) = %d %s, want %d %s", c.err, pe.Status, pe.Code, c.status, c.code)
		}
		if c.code == apiv1.CodeUnavailable && pe.Message == c.err.Error() {
			t.Errorf("PublicError(%v) shows the transport error", c.err)
		}
	}
	if fe := FileError(&agentclient.Error{Code: agentproto.CodeNotFound, Message: "no such file"}); fe.Status != http.StatusNotFound || fe.Code != apiv1.CodeNotFound || fe.Message != "no such file" {
		t.Errorf("FileError(not found) = %+v", fe)
	}
	if fe := FileError(mapped); fe != mapped {
		t.Errorf("FileError(mapped) = %+v", fe)
	}
}
