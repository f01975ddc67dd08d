package api

import (
	"net/http"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/sandboxes"
)

// Every refusal of the sandboxes service is answered with its own status
// and code, never as an internal error, and keeps its message.
func TestSandboxErrors(t *testing.T) {
	t.Parallel()
	for kind, want := range map[sandboxes.Kind]struct {
		status int
		code   string
	}{
		sandboxes.NotFound:                    {http.StatusNotFound, apiv1.CodeNotFound},
		sandboxes.TemplateNotFound:            {http.StatusNotFound, apiv1.CodeTemplateNotFound},
		sandboxes.BuildFailed:                 {http.StatusFailedDependency, apiv1.CodeBuildFailed},
		sandboxes.Unavailable:                 {http.StatusServiceUnavailable, apiv1.CodeUnavailable},
		sandboxes.ExceedsCapacity:             {http.StatusBadRequest, apiv1.CodeExceedsCapacity},
		sandboxes.NotSupported:                {http.StatusNotImplemented, apiv1.CodeNotSupported},
		sandboxes.EnvironmentUnknown:          {http.StatusBadRequest, apiv1.CodeEnvironmentUnknown},
		sandboxes.EnvironmentArtifactsMissing: {http.StatusConflict, apiv1.CodeEnvironmentArtifactsMissing},
		sandboxes.EnvironmentUnavailable:      {http.StatusConflict, apiv1.CodeEnvironmentUnavailable},
		sandboxes.NoEligibleNode:              {http.StatusConflict, apiv1.CodeNoEligibleNode},
		sandboxes.NoCapacity:                  {http.StatusServiceUnavailable, apiv1.CodeNoCapacity},
		sandboxes.Busy:                        {http.StatusConflict, apiv1.CodeSandboxBusy},
		sandboxes.InvalidTransition:           {http.StatusConflict, apiv1.CodeInvalidTransition},
		sandboxes.ResumeTimeout:               {http.StatusGatewayTimeout, apiv1.CodeResumeTimeout},
	} {
		ae, known := classify(&sandboxes.Error{Kind: kind, Message: "m"})
		if !known || ae.status != want.status || ae.code != want.code || ae.msg != "m" {
			t.Errorf("%s: %d %s %q (known %v), want %d %s", kind, ae.status, ae.code, ae.msg, known, want.status, want.code)
		}
	}
}
