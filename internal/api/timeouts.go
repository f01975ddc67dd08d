package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// ActivityRecorder is told of API calls that use a sandbox of the caller's
// project (the server's *activity.Tracker), for idle limits: every
// mutating call that names it, and every call that reaches into it
// (processes, files). Reading its record (GET /v1/sandboxes/{id}, lists)
// is not activity: a dashboard that polls must not keep sandboxes awake.
type ActivityRecorder interface {
	Touch(id model.SandboxID)
}

// touch records activity of a sandbox the caller named.
func (a *API) touch(id model.SandboxID) {
	if a.cfg.Activity != nil {
		a.cfg.Activity.Touch(id)
	}
}

// defaultIdleTimeout is the idle limit of a sandbox whose create request
// names none.
func (a *API) defaultIdleTimeout() time.Duration {
	switch d := a.cfg.DefaultIdleTimeout; {
	case d < 0:
		return 0
	case d == 0:
		return model.DefaultIdleTimeout
	default:
		return d
	}
}

// parseTimeout checks a timeout in seconds and returns the deadline it sets
// from now (zero for 0: none).
func parseTimeout(seconds int64, now time.Time) (time.Time, error) {
	maxS := int64(model.MaxTimeout / time.Second)
	if seconds < 0 || seconds > maxS {
		return time.Time{}, badRequest("timeout must be between 0 (none) and %d seconds (%s), not %d", maxS, model.MaxTimeout, seconds)
	}
	if seconds == 0 {
		return time.Time{}, nil
	}
	return now.Add(time.Duration(seconds) * time.Second), nil
}

// parseOnTimeout parses a request's on_timeout: absent is delete, but an
// empty string given is a mistake, not a choice.
func parseOnTimeout(present bool, s string) (model.OnTimeout, error) {
	if present && s == "" {
		return "", badRequest(`on_timeout must be "delete" or "suspend", not empty`)
	}
	return model.ParseOnTimeout(s)
}

// timeoutSnapshotKind is the kind of snapshot a deadline that does on
// writes: from timeout_keep_memory when the request gives it (only with
// on_timeout suspend), else cur (what the sandbox had, "" at create) while
// on is a suspend.
func timeoutSnapshotKind(on model.OnTimeout, present bool, keep *bool, cur model.SnapshotKind) (model.SnapshotKind, error) {
	switch {
	case present && keep == nil:
		return "", badRequest("timeout_keep_memory must be true or false, not null (omit it for what the runtime's suspend keeps)")
	case present && on != model.OnTimeoutSuspend:
		return "", badRequest("timeout_keep_memory applies to on_timeout suspend, not %s", on)
	case present:
		return model.SnapshotKindKeeping(*keep), nil
	case on != model.OnTimeoutSuspend:
		return "", nil
	}
	return cur, nil
}

// createTimeouts reads the timeout, on_timeout and idle_timeout of a
// create request.
func (a *API) createTimeouts(c *call[apiv1.CreateSandboxRequest]) (model.Timeouts, error) {
	var (
		to  = model.Timeouts{Idle: a.defaultIdleTimeout()}
		err error
	)
	if to.Deadline, err = parseTimeout(c.in.Timeout, c.now); err != nil {
		return model.Timeouts{}, err
	}
	if to.OnTimeout, err = parseOnTimeout(c.present["on_timeout"], c.in.OnTimeout); err != nil {
		return model.Timeouts{}, err
	}
	if to.SnapshotKind, err = timeoutSnapshotKind(to.OnTimeout, c.present["timeout_keep_memory"], c.in.TimeoutKeepMemory, ""); err != nil {
		return model.Timeouts{}, err
	}
	if c.present["idle_timeout"] {
		if c.in.IdleTimeout == nil {
			return model.Timeouts{}, badRequest("idle_timeout must be a number of seconds (0: never), not null")
		}
		maxS := int64(model.MaxIdleTimeout / time.Second)
		if s := *c.in.IdleTimeout; s < 0 || s > maxS {
			return model.Timeouts{}, badRequest("idle_timeout must be between 0 (never) and %d seconds (%s), not %d", maxS, model.MaxIdleTimeout, s)
		}
		to.Idle = time.Duration(*c.in.IdleTimeout) * time.Second
	}
	return to, nil
}

// setSandboxTimeout: POST /v1/sandboxes/{id}/timeout → 200 Sandbox. The
// deadline becomes now + timeout (0: none); on_timeout, if given, replaces
// the sandbox's. 409 for a sandbox being deleted or deleted.
func (a *API) setSandboxTimeout(ctx context.Context, c *call[apiv1.SetTimeoutRequest]) (*reply, error) {
	id, err := model.ParseSandboxID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !c.present["timeout"] {
		return nil, badRequest("timeout is required: seconds from now (0 removes the deadline)")
	}
	deadline, err := parseTimeout(c.in.Timeout, c.now)
	if err != nil {
		return nil, err
	}
	cur, err := a.sandboxOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	on, kind := cur.Timeouts.OnTimeout, cur.Timeouts.SnapshotKind
	if c.present["on_timeout"] {
		if on, err = parseOnTimeout(true, c.in.OnTimeout); err != nil {
			return nil, err
		}
		kind = "" // a new on_timeout: the runtime's unless said again
	}
	if kind, err = timeoutSnapshotKind(on, c.present["timeout_keep_memory"], c.in.TimeoutKeepMemory, kind); err != nil {
		return nil, err
	}
	if kind != cur.Timeouts.SnapshotKind && cur.Runtime != "" {
		if err := a.cfg.Sandboxes.CheckSuspendKind("sandbox "+string(id)+"'s deadline", cur.Runtime, kind); err != nil {
			return nil, err
		}
	}
	sb, err := a.cfg.Store.SetSandboxTimeout(ctx, c.p.project, id, deadline, on, kind, c.now)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("sandbox %s not found", id)
	}
	if errors.Is(err, model.ErrInvalidTransition) {
		return nil, errorf(apiv1.CodeInvalidTransition, "sandbox %s is being deleted or deleted: its timeout cannot change", id)
	}
	if err != nil {
		return nil, fmt.Errorf("set timeout of %s: %w", id, err)
	}
	// Setting a deadline is idempotent but for its "now": a retry after a
	// crash before the record is stored sets it again from its own now.
	rep, rec, err := c.reply(http.StatusOK, sandboxOut(sb))
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}

// timeoutsOut fills the timeout fields of a sandbox's wire form.
func timeoutsOut(out *apiv1.Sandbox, sb model.Sandbox) {
	on, err := model.ParseOnTimeout(string(sb.Timeouts.OnTimeout))
	if err != nil {
		on = sb.Timeouts.OnTimeout
	}
	out.OnTimeout = string(on)
	if k := sb.Timeouts.SnapshotKind; k != "" {
		keep := k == model.SnapshotMemory
		out.TimeoutKeepMemory = &keep
	}
	out.IdleTimeout = int64(sb.Timeouts.Idle / time.Second)
	if !sb.Timeouts.Deadline.IsZero() {
		t := sb.Timeouts.Deadline.UTC()
		out.TimeoutAt = &t
	}
	if !sb.LastActivity.IsZero() {
		t := sb.LastActivity.UTC()
		out.LastActivityAt = &t
	}
}
