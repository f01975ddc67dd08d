package dataplane

import (
	"errors"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// authorize checks the request's attachment token for action on process pid
// with the Verifier alone: no store lookup decides whether a token is
// genuine. On refusal it writes the JSON error (401 unauthenticated,
// token_expired or wrong_token_kind; 403 permission_denied) and returns
// false; nothing else has happened yet.
func (d *DataPlane) authorize(w http.ResponseWriter, r *http.Request, pid model.ProcessID, action auth.Action) (auth.AttachClaims, bool) {
	code, msg, claims := d.checkToken(bearer(r), pid, action)
	if code != "" {
		writeError(w, code, msg)
		return auth.AttachClaims{}, false
	}
	return claims, true
}

// checkToken is authorize without the response: an empty code means allowed.
func (d *DataPlane) checkToken(tok string, pid model.ProcessID, action auth.Action) (code, msg string, claims auth.AttachClaims) {
	if tok == "" {
		return apiv1.CodeUnauthenticated, "missing attachment token: send Authorization: Bearer <attachment_token>", claims
	}
	switch auth.KindOf(tok) {
	case auth.KindAPIKey:
		return apiv1.CodeWrongTokenKind, "an API key cannot attach to a process; use the command session's attachment token", claims
	case auth.KindFiles:
		return apiv1.CodeWrongTokenKind, "a file transfer token cannot attach to a process; use the command session's attachment token", claims
	case auth.KindSandbox:
		return apiv1.CodeWrongTokenKind, "a sandbox access token cannot attach to a process; use the command session's attachment token", claims
	}
	if d.cfg.Verifier == nil {
		return apiv1.CodeNotSupported, "this data plane has no attachment keys", claims
	}
	claims, err := d.cfg.Verifier.Verify(tok, d.cfg.Now())
	switch {
	case errors.Is(err, auth.ErrTokenExpired):
		return apiv1.CodeTokenExpired, "attachment token expired; get a new one with POST /v1/sandboxes/{id}/processes/{process_id}/attachments", auth.AttachClaims{}
	case err != nil:
		return apiv1.CodeUnauthenticated, "invalid attachment token", auth.AttachClaims{}
	}
	// The token is genuine from here on: saying why it does not fit is safe.
	if claims.Process != pid {
		return apiv1.CodePermissionDenied, "this attachment token is for another process", auth.AttachClaims{}
	}
	// A token for a sandbox on another node is forwarded there when this
	// data plane routes (authorizeProcess); otherwise it is refused.
	if d.cfg.NodeID != "" && claims.Node != d.cfg.NodeID && !d.router.Remote(claims.Node) {
		return apiv1.CodePermissionDenied, "this attachment token is for a sandbox on another node", auth.AttachClaims{}
	}
	if !claims.Allows(action) {
		return apiv1.CodePermissionDenied, "this attachment token does not allow " + string(action), auth.AttachClaims{}
	}
	return "", "", claims
}

// authorizeSession checks that the stored session of the process is the one
// the token names. It cannot differ for a token the API issued; a mismatch
// is refused rather than trusted.
func authorizeSession(w http.ResponseWriter, claims auth.AttachClaims, cs model.CommandSession) bool {
	if cs.ID != claims.Session || cs.SandboxID != claims.Sandbox {
		writeError(w, apiv1.CodePermissionDenied, "this attachment token is for another command session")
		return false
	}
	return true
}
