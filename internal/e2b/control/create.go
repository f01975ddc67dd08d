package control

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// defaultTimeout is E2B's default sandbox lifetime, in seconds.
const defaultTimeout = 300

// maxTimeoutSecs is the longest timeout accepted (Airlock's own bound).
const maxTimeoutSecs = int64(model.MaxTimeout / time.Second)

// httpError is an error answered with its status and message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notImplemented(format string, args ...any) error {
	return &httpError{status: http.StatusNotImplemented, msg: fmt.Sprintf(format, args...)}
}

// createSpec is a parsed E2B create request.
type createSpec struct {
	e2bTemplate string // as the caller named it
	native      apiv1.CreateSandboxRequest
}

// parseTimeout parses an E2B timeout in seconds; absent is def. E2B's 0
// ends the sandbox now, while Airlock's 0 means "no deadline": 0 becomes
// one second.
func parseTimeout(v *int64, def int64) (int64, error) {
	if v == nil {
		return def, nil
	}
	switch s := *v; {
	case s < 0 || s > maxTimeoutSecs:
		return 0, badRequest("timeout must be from 0 to %d seconds, not %d", maxTimeoutSecs, s)
	case s == 0:
		return 1, nil
	default:
		return s, nil
	}
}

// parseEgress maps allow_internet_access and network.allowOut/denyOut to
// an Airlock egress policy that decides as E2B does (e2bEgress); the
// other network settings that have no Airlock counterpart are refused.
func parseEgress(in createIn) (*apiv1.EgressPolicy, error) {
	r := e2bRules{internet: in.AllowInternetAccess}
	if n := in.Network; n != nil {
		switch {
		case present(n.EgressProxy):
			return nil, errEgressProxy
		case present(n.HTTPSPorts):
			return nil, notImplemented("network.httpsPorts is not supported by Airlock's E2B API: guest ports are reached over the server's own listener")
		}
		r.allowOut, r.denyOut = n.AllowOut, n.DenyOut
	}
	pol, err := e2bEgress(r)
	if err != nil || in.Network == nil || !present(in.Network.Rules) {
		return pol, err
	}
	headers, err := parseRules(in.Network.Rules)
	if err != nil || len(headers) == 0 {
		return pol, err
	}
	if pol == nil {
		pol = &apiv1.EgressPolicy{} // the server's default, with the rules
	}
	pol.Headers = headers
	return pol, nil
}

// publicPorts is whether the sandbox's guest ports answer anyone, as E2B's
// network.allowPublicTraffic says: yes unless it is false (then they take
// the trafficAccessToken, E2B-Traffic-Access-Token, or the envd access
// token; both are the sandbox's access token here).
func publicPorts(in createIn) bool {
	return in.Network == nil || in.Network.AllowPublicTraffic == nil || *in.Network.AllowPublicTraffic
}

// parseCreate turns an E2B create body into the native create request.
func parseCreate(in createIn) (createSpec, error) {
	tpl := strings.TrimSpace(in.TemplateID)
	if tpl == "" {
		return createSpec{}, badRequest("templateID is required")
	}
	switch {
	case present(in.IAM):
		return createSpec{}, notImplemented("iam tokens are not supported by Airlock's E2B API")
	case present(in.MCP) && !isObject(in.MCP):
		// The SDK itself starts the gateway in the new sandbox (the
		// template's mcp-gateway, run as root with the config); the
		// server only takes the config, as E2B's does.
		return createSpec{}, badRequest("mcp must be an object (MCP server name → configuration)")
	}
	volumes, err := parseVolumeMounts(in.VolumeMounts)
	if err != nil {
		return createSpec{}, err
	}
	timeout, err := parseTimeout(in.Timeout, defaultTimeout)
	if err != nil {
		return createSpec{}, err
	}
	for k := range in.Metadata {
		// The native API takes reserved keys from this translation,
		// in-process, so it refuses them here.
		if model.ReservedMetadataKey(k) {
			return createSpec{}, badRequest("metadata key %q is reserved (keys starting with e2b.airlock/ or airlock/)", k)
		}
	}
	md := make(map[string]string, len(in.Metadata)+1)
	for k, v := range in.Metadata {
		md[k] = v
	}
	md[templateKey] = tpl
	if n := in.Network; n != nil && n.MaskRequestHost != nil {
		mask, err := parseMask(*n.MaskRequestHost)
		if err != nil {
			return createSpec{}, err
		}
		md[MaskKey] = mask
	}
	egress, err := parseEgress(in)
	if err != nil {
		return createSpec{}, err
	}
	on := model.OnTimeoutDelete
	if in.AutoPause != nil && *in.AutoPause {
		on = model.OnTimeoutSuspend
	}
	// autoPauseMemory (lifecycle onTimeout {action: 'pause', keepMemory})
	// is what the deadline's suspend keeps: false, only the filesystem (a
	// wake boots again). The native create refuses (501) a runtime that
	// cannot do that; E2B refuses it beside auto-resume, as here.
	var keepMemory *bool
	if in.AutoPauseMemory != nil {
		switch {
		case on != model.OnTimeoutSuspend:
			return createSpec{}, badRequest("autoPauseMemory applies to autoPause true (lifecycle onTimeout pause), not kill")
		case !*in.AutoPauseMemory && in.AutoResume != nil && in.AutoResume.Enabled:
			return createSpec{}, badRequest("autoPauseMemory false (a filesystem-only pause, resumed by connect) cannot be combined with autoResume")
		}
		keepMemory = in.AutoPauseMemory
	}
	// The E2B timeout ends an E2B sandbox; the server's idle limit (not
	// E2B's) still suspends one nobody uses, which bounds a sandbox that
	// traffic woke after a pause cleared its deadline.
	native := nativeTemplate(tpl)
	var snapshot string
	if id, ok := parseSnapshotRef(tpl); ok {
		// E2B starts from a snapshot as from a template.
		native, snapshot = "", id.String()
	}
	return createSpec{
		e2bTemplate: tpl,
		native: apiv1.CreateSandboxRequest{
			Template:    native,
			Snapshot:    snapshot,
			Env:         in.EnvVars,
			Metadata:    md,
			Egress:      egress,
			Timeout:     timeout,
			OnTimeout:   string(on),
			PublicPorts: publicPorts(in),

			TimeoutKeepMemory: keepMemory,

			VolumeMounts: volumes,
		},
	}, nil
}

// asHTTPError reports whether err is an *httpError.
func asHTTPError(err error) (*httpError, bool) {
	var he *httpError
	ok := errors.As(err, &he)
	return he, ok
}
