package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// KeyRotator rotates the attachment-token signing key. *auth.Keyring is one.
type KeyRotator interface {
	Rotate() (kid string, err error)
	Keys() []auth.KeyInfo
}

// issueAttachment signs an attachment token for the session's process with
// the given actions. It returns the token and its expiry (whole seconds, as
// in the token).
func (a *API) issueAttachment(sb model.Sandbox, cs model.CommandSession, actions []auth.Action, now time.Time) (string, time.Time, error) {
	exp := now.Add(a.cfg.AttachTTL).Truncate(time.Second)
	token, err := a.cfg.Attach.Issue(auth.AttachClaims{
		Session:   cs.ID,
		Sandbox:   sb.ID,
		Process:   cs.ProcessID,
		Node:      sb.NodeID,
		Actions:   actions,
		IssuedAt:  now,
		ExpiresAt: exp,
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return token, exp, nil
}

// commandSessionOut is the wire form of a session with a freshly issued token.
func (a *API) commandSessionOut(r *http.Request, cs model.CommandSession, token string, exp time.Time) apiv1.CommandSession {
	return apiv1.CommandSession{
		ID:              cs.ID.String(),
		SandboxID:       cs.SandboxID.String(),
		ProcessID:       cs.ProcessID.String(),
		AttachURL:       a.baseURL(r) + AttachPath(cs.ProcessID),
		AttachmentToken: token,
		ExpiresAt:       exp,
		WebSocketURL:    wsURL(a.baseURL(r)) + apiv1.ProcessDataPath(cs.ProcessID.String(), "ws"),
	}
}

// attachmentBody is the optional body of createAttachment: a request
// without a body means all actions.
type attachmentBody apiv1.CreateAttachmentRequest

func (attachmentBody) optionalBody() {}

// createAttachment: POST /v1/sandboxes/{id}/processes/{process_id}/attachments
// → 201 CommandSession with a new attachment token for an existing process
// of the caller's project, optionally narrowed to fewer actions. Nothing is
// written but the idempotency record.
func (a *API) createAttachment(ctx context.Context, c *call[attachmentBody]) (*reply, error) {
	actions := auth.AllActions()
	if c.present["actions"] {
		var err error
		if actions, err = auth.ParseActions(c.in.Actions); err != nil {
			return nil, err
		}
	}
	pid, err := model.ParseProcessID(c.r.PathValue("process_id"))
	if err != nil {
		return nil, err
	}
	sb, err := a.sandboxOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	cs, err := a.cfg.Store.GetCommandSessionByProcess(ctx, pid)
	if errors.Is(err, store.ErrNotFound) || err == nil && (cs.ProjectID != c.p.project || cs.SandboxID != sb.ID) {
		return nil, notFound("process %s not found in sandbox %s", pid, sb.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("get command session of %s: %w", pid, err)
	}
	if sb.State != model.StateRunning {
		return nil, notRunning(sb)
	}
	token, exp, err := a.issueAttachment(sb, cs, actions, c.now)
	if err != nil {
		return nil, err
	}
	rep, rec, err := c.reply(http.StatusCreated, a.commandSessionOut(c.r, cs, token, exp))
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}

// rotateAttachKey: POST /v1/admin/attach-keys/rotate → 200 AttachKeyList.
// New tokens are signed with the new key at once; tokens signed with the
// previous key keep verifying until they expire.
func (a *API) rotateAttachKey(ctx context.Context, c *call[noBody]) (*reply, error) {
	if a.cfg.AttachKeys == nil {
		return nil, errorf(apiv1.CodeNotSupported, "this server's attachment keys cannot be rotated through the API")
	}
	kid, err := a.cfg.AttachKeys.Rotate()
	if err != nil {
		return nil, fmt.Errorf("rotate attachment key: %w", err)
	}
	a.log.InfoContext(ctx, "attachment signing key rotated", "kid", kid, "by", c.p.keyID)
	out := apiv1.AttachKeyList{Keys: []apiv1.AttachKey{}}
	for _, k := range a.cfg.AttachKeys.Keys() {
		ak := apiv1.AttachKey{ID: k.ID, CreatedAt: k.CreatedAt.UTC(), Active: k.Active}
		if !k.NotAfter.IsZero() {
			na := k.NotAfter.UTC()
			ak.NotAfter = &na
		}
		out.Keys = append(out.Keys, ak)
	}
	rep, rec, err := c.reply(http.StatusOK, out)
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}
