// Package wake brings a sandbox to running for the E2B layers: the gateway
// before an in-sandbox request (envd's services, the code interpreter, a
// guest port with the sandbox's token) and the control API's connect and
// resume. There is one loop, with one bound, for both; it acts through
// Airlock's own API, as the rest of the E2B layers do, so it works with
// any credential that may read the sandbox and wake it (an API key, or a
// caller acting as the sandbox's access token).
package wake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
)

// Timeout bounds how long Running waits for a sandbox to run: below the
// E2B SDKs' 60 s request timeout, so that a caller gets Airlock's answer
// (why the sandbox is not running) rather than its own timeout.
const Timeout = 50 * time.Second

// poll is how often the sandbox's state is read while it changes.
const poll = 100 * time.Millisecond

// ErrGone says the sandbox will not run again: it failed, or it is being
// (or was) deleted.
var ErrGone = errors.New("the sandbox will not run again")

// ErrTimeout says the sandbox did not run within Timeout; it wraps
// context.DeadlineExceeded.
var ErrTimeout = fmt.Errorf("the sandbox did not run within %s: %w", Timeout, context.DeadlineExceeded)

// Running makes sandbox id run and returns it running: a suspended sandbox
// is woken, a paused one resumed, and a transition under way (another
// request's wake among them) waited out; a wake or resume refused because
// another one got there first is followed by waiting. acted says whether
// this call asked for a wake or resume. A wake or resume it asked for that
// ends with the sandbox back where it was has failed: the error is a
// *client.OperationFailedError when the credential may read operations,
// else it gives the sandbox's state reason. The sandbox's own errors (not
// found) are the API's; ErrGone and ErrTimeout are wrapped.
func Running(ctx context.Context, c *client.Client, id model.SandboxID) (sb apiv1.Sandbox, acted bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var asked *apiv1.Operation
	for {
		sb, err = c.GetSandbox(wctx, id)
		if err != nil {
			return sb, acted, timedOut(ctx, wctx, id, "", fmt.Errorf("sandbox %s: %w", id, err))
		}
		state := model.SandboxState(sb.State)
		var kind model.OperationKind
		switch state {
		case model.StateRunning:
			return sb, acted, nil
		case model.StateSuspended:
			kind = model.OpWake
		case model.StatePaused:
			kind = model.OpResume
		case model.StateFailed, model.StateDeleting, model.StateDeleted:
			return sb, acted, fmt.Errorf("sandbox %s is %s: %w", id, state, ErrGone)
		}
		if kind != "" {
			if asked != nil {
				again, err := failed(wctx, c, *asked, sb)
				if err != nil {
					return sb, acted, err
				}
				if again {
					asked = nil // it ran and went back to sleep since: once more
					continue
				}
			}
			res, err := c.LifecycleSandbox(wctx, id, kind)
			switch {
			case err == nil:
				asked, acted = &res.Operation, true
				continue // it is on its way now
			case client.IsCode(err, apiv1.CodeInvalidTransition), client.IsCode(err, apiv1.CodeSandboxBusy):
				// Someone else moved it, or is moving it: look again.
			default:
				return sb, acted, timedOut(ctx, wctx, id, state, fmt.Errorf("%s sandbox %s: %w", kind, id, err))
			}
		}
		if err := retry.Sleep(wctx, retry.SystemClock(), poll); err != nil {
			return sb, acted, timedOut(ctx, wctx, id, state, err)
		}
	}
}

// failed tells why the wake or resume op of sandbox sb ended with it back
// where it was: the operation's failure, or (it succeeded) again true: the
// sandbox ran and went back to sleep since.
func failed(ctx context.Context, c *client.Client, op apiv1.Operation, sb apiv1.Sandbox) (again bool, err error) {
	got, err := c.GetOperation(ctx, model.OperationID(op.ID), 0)
	switch {
	case err == nil && got.State == string(model.OpSucceeded):
		return true, nil
	case err == nil && got.State == string(model.OpFailed):
		return false, &client.OperationFailedError{Operation: got}
	}
	// The credential cannot read operations (a sandbox's own): the
	// sandbox says why.
	why := sb.StateReason
	if why == "" {
		why = "it is " + sb.State + " again"
	}
	return false, fmt.Errorf("%s sandbox %s failed: %s", op.Kind, sb.ID, why)
}

// timedOut is err, or ErrTimeout when Running's own bound (not the
// caller's context) ended it.
func timedOut(ctx, wctx context.Context, id model.SandboxID, state model.SandboxState, err error) error {
	if ctx.Err() != nil || wctx.Err() == nil {
		return err
	}
	if state == "" {
		return fmt.Errorf("sandbox %s: %w", id, ErrTimeout)
	}
	return fmt.Errorf("sandbox %s (%s): %w", id, state, ErrTimeout)
}
