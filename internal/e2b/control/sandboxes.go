package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/wake"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// parseID parses the {id} path value. A malformed ID names no sandbox:
// 404, as upstream answers an unknown one.
func parseID(r *http.Request) (model.SandboxID, error) {
	id, err := model.ParseSandboxID(r.PathValue("id"))
	if err != nil {
		return "", &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("sandbox %q not found", textclip.Bytes(r.PathValue("id"), maxEcho))}
	}
	return id, nil
}

func notFound(id model.SandboxID) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("sandbox %s not found", id)}
}

// lookup returns a sandbox that exists for E2B, with its E2B state: a
// failed, deleting or deleted sandbox is a 404.
func lookup(ctx context.Context, c *client.Client, id model.SandboxID) (apiv1.Sandbox, e2bState, error) {
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return apiv1.Sandbox{}, "", fmt.Errorf("get sandbox %s: %w", id, err)
	}
	st, ok := e2bStateOf(model.SandboxState(sb.State))
	if !ok {
		return apiv1.Sandbox{}, "", notFound(id)
	}
	return sb, st, nil
}

func (h *Handler) domain() *string {
	if h.cfg.Domain == "" {
		return nil
	}
	d := h.cfg.Domain
	return &d
}

// sandboxReply builds E2B's Sandbox for a running sandbox.
func (h *Handler) sandboxReply(ctx context.Context, sb apiv1.Sandbox) (sandboxOut, error) {
	tok, err := h.cfg.AccessToken(ctx, sb)
	if err != nil {
		return sandboxOut{}, fmt.Errorf("access token for %s: %w", sb.ID, err)
	}
	return sandboxOut{
		SandboxID:       sb.ID,
		TemplateID:      templateIDOf(sb),
		ClientID:        clientID,
		EnvdVersion:     EnvdVersion,
		EnvdAccessToken: tok,
		Domain:          h.domain(),
		// The code interpreter SDK sends it as E2B-Traffic-Access-Token
		// on every call; the gateway wants a credential on port 49999.
		TrafficAccessToken: &tok,
	}, nil
}

// waitOp waits for a native operation to succeed.
func waitOp(ctx context.Context, c *client.Client, op apiv1.Operation) error {
	if _, err := c.WaitOperation(ctx, model.OperationID(op.ID)); err != nil {
		return fmt.Errorf("waiting for %s of %s: %w", op.Kind, op.SandboxID, err)
	}
	return nil
}

// create answers POST /v2/sandboxes and POST /sandboxes.
func (h *Handler) create(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var in createIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	spec, err := parseCreate(in)
	if err != nil {
		return err
	}
	res, err := c.CreateSandbox(ctx, spec.native)
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	id := model.SandboxID(res.Sandbox.ID)
	if err := waitOp(ctx, c, res.Operation); err != nil {
		// An E2B caller that got no sandbox ID cannot delete it: a
		// sandbox whose create failed goes now (one whose caller went
		// away still has its deadline).
		if ctx.Err() == nil {
			if _, derr := c.DeleteSandbox(context.WithoutCancel(ctx), id); derr != nil {
				h.log.Warn("e2b control: delete after failed create", "sandbox", id, "err", derr)
			}
		}
		return err
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", id, err)
	}
	out, err := h.sandboxReply(ctx, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// get answers GET /sandboxes/{id}.
func (h *Handler) get(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	sb, st, err := lookup(ctx, c, id)
	if err != nil {
		return err
	}
	tok, err := h.cfg.AccessToken(ctx, sb)
	if err != nil {
		return fmt.Errorf("access token for %s: %w", sb.ID, err)
	}
	mounts, err := volumeMountsOut(ctx, c, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, detailOut{
		listedOut:           listed(sb, st),
		EnvdAccessToken:     tok,
		Domain:              h.domain(),
		AllowInternetAccess: allowInternet(sb),
		Lifecycle:           onTimeoutOut(sb),
		VolumeMounts:        mounts,
	})
	return nil
}

// kill answers DELETE /sandboxes/{id}: 204 once the delete is accepted.
func (h *Handler) kill(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", id, err)
	}
	switch model.SandboxState(sb.State) {
	case model.StateDeleting, model.StateDeleted:
		return notFound(id)
	}
	if _, err := c.DeleteSandbox(ctx, id); err != nil {
		if client.IsCode(err, apiv1.CodeNotFound) {
			return notFound(id)
		}
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// extendTimeout moves the deadline to timeout seconds from now unless it
// already lies later (or the sandbox has none); autoPause, when given,
// sets what happens then. force sets the deadline even if that shortens it.
func extendTimeout(ctx context.Context, c *client.Client, sb apiv1.Sandbox, timeout int64, autoPause *bool, force bool) error {
	want := time.Now().Add(time.Duration(timeout) * time.Second)
	req := apiv1.SetTimeoutRequest{Timeout: timeout}
	if autoPause != nil {
		req.OnTimeout = string(model.OnTimeoutDelete)
		if *autoPause {
			// What the pause keeps stays as the create said.
			req.OnTimeout, req.TimeoutKeepMemory = string(model.OnTimeoutSuspend), sb.TimeoutKeepMemory
		}
	}
	if !force && req.OnTimeout == "" && (sb.TimeoutAt == nil || !sb.TimeoutAt.Before(want)) {
		return nil
	}
	id := model.SandboxID(sb.ID)
	if _, err := c.SetSandboxTimeout(ctx, id, req); err != nil {
		return fmt.Errorf("set timeout of %s: %w", id, err)
	}
	return nil
}

// connectMode says how connect treats a running sandbox.
type connectMode int

const (
	connectAny    connectMode = iota // running: 200; brought back: 201
	connectResume                    // running: 409 (legacy /resume)
)

// bringUp makes the sandbox run (wake.Running, as the gateway does before
// an in-sandbox request): it returns the running sandbox and whether it
// had to act. A sandbox that will not run again is a 404, as lookup
// answers it.
func bringUp(ctx context.Context, c *client.Client, id model.SandboxID) (apiv1.Sandbox, bool, error) {
	sb, acted, err := wake.Running(ctx, c, id)
	if errors.Is(err, wake.ErrGone) {
		return apiv1.Sandbox{}, false, notFound(id)
	}
	if err != nil {
		return apiv1.Sandbox{}, false, fmt.Errorf("bring sandbox %s back: %w", id, err)
	}
	return sb, acted, nil
}

// connect answers POST /v2/sandboxes/{id}/connect and POST
// /sandboxes/{id}/connect: 200 for a running sandbox (the timeout only
// extends its deadline), 201 for one it woke or resumed (the deadline is
// set to the timeout).
func (h *Handler) connect(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	return h.bringBack(ctx, w, r, c, connectAny)
}

// resume answers legacy POST /sandboxes/{id}/resume: 201, or 409 for a
// running sandbox.
func (h *Handler) resume(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	return h.bringBack(ctx, w, r, c, connectResume)
}

func (h *Handler) bringBack(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client, mode connectMode) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in connectIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	timeout, err := parseTimeout(in.Timeout, defaultTimeout)
	if err != nil {
		return err
	}
	if mode == connectResume {
		sb, _, err := lookup(ctx, c, id)
		if err != nil {
			return err
		}
		if model.SandboxState(sb.State) == model.StateRunning {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s is already running", id)}
		}
	}
	sb, acted, err := bringUp(ctx, c, id)
	if err != nil {
		return err
	}
	if err := extendTimeout(ctx, c, sb, timeout, in.AutoPause, acted); err != nil {
		return err
	}
	out, err := h.sandboxReply(ctx, sb)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if acted || mode == connectResume {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
	return nil
}

// setTimeout answers POST /sandboxes/{id}/timeout: the deadline becomes
// timeout seconds from now (it may shorten). A paused sandbox is a 404, as
// upstream (older SDKs resume on it).
func (h *Handler) setTimeout(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in timeoutIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	if in.Timeout == nil {
		return badRequest("timeout is required (seconds)")
	}
	timeout, err := parseTimeout(in.Timeout, 0)
	if err != nil {
		return err
	}
	sb, st, err := lookup(ctx, c, id)
	if err != nil {
		return err
	}
	if st == statePaused {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("sandbox %s is paused", id)}
	}
	if err := extendTimeout(ctx, c, sb, timeout, nil, true); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// maxRefresh bounds POST /sandboxes/{id}/refreshes' duration (upstream's
// bound).
const maxRefresh = 3600

// refresh answers POST /sandboxes/{id}/refreshes: the deadline moves to
// duration seconds from now unless it lies later already (absent: 0, no
// change).
func (h *Handler) refresh(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in refreshIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	var d int64
	if in.Duration != nil {
		d = *in.Duration
	}
	if d < 0 || d > maxRefresh {
		return badRequest("duration must be from 0 to %d seconds", maxRefresh)
	}
	sb, st, err := lookup(ctx, c, id)
	if err != nil {
		return err
	}
	if st == statePaused {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("sandbox %s is paused", id)}
	}
	if d > 0 {
		if err := extendTimeout(ctx, c, sb, d, nil, false); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause answers POST /sandboxes/{id}/pause: Airlock suspend, waited for;
// 409 if it is paused (suspended, or on its way) already.
func (h *Handler) pause(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in pauseIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	sb, _, err := lookup(ctx, c, id)
	if err != nil {
		return err
	}
	switch model.SandboxState(sb.State) {
	case model.StateSuspended, model.StateSuspending:
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s is already paused", id)}
	}
	// A paused E2B sandbox stays until it is resumed or killed: its
	// deadline must not delete it while it is suspended (connect sets a
	// new one). Put back if the suspend is refused.
	if sb.TimeoutAt != nil {
		if _, err := c.SetSandboxTimeout(ctx, id, apiv1.SetTimeoutRequest{Timeout: 0}); err != nil {
			return fmt.Errorf("clear the deadline of sandbox %s: %w", id, err)
		}
	}
	// memory false: a filesystem-only suspend, which the native API
	// refuses (501) on a runtime whose suspend keeps memory; memory true
	// (the SDK's default) takes what the runtime's suspend keeps.
	var res apiv1.SandboxWithOperation
	if in.Memory != nil && !*in.Memory {
		res, err = c.SuspendSandboxKeeping(ctx, id, false)
	} else {
		res, err = c.SuspendSandbox(ctx, id)
	}
	if err != nil && sb.TimeoutAt != nil {
		if left := int64(time.Until(*sb.TimeoutAt).Seconds()); left > 0 {
			if _, rerr := c.SetSandboxTimeout(ctx, id, apiv1.SetTimeoutRequest{Timeout: left, OnTimeout: sb.OnTimeout, TimeoutKeepMemory: sb.TimeoutKeepMemory}); rerr != nil {
				h.log.Error("e2b: put back the deadline after a refused pause", "sandbox", id, "err", rerr)
			}
		}
	}
	if err != nil {
		if client.IsCode(err, apiv1.CodeInvalidTransition) {
			return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s cannot be paused now: %v", id, err)}
		}
		return fmt.Errorf("suspend sandbox %s: %w", id, err)
	}
	if err := waitOp(ctx, c, res.Operation); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// list answers GET /v2/sandboxes.
func (h *Handler) list(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		return badRequest("%v", err)
	}
	return h.answerList(ctx, w, c, q)
}

// listLegacy answers GET /sandboxes (running sandboxes, no paging).
func (h *Handler) listLegacy(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	q, err := parseLegacyListQuery(r.URL.Query())
	if err != nil {
		return badRequest("%v", err)
	}
	return h.answerList(ctx, w, c, q)
}

// answerList lists through the native API (states and metadata filtered
// there), filters by start and template, orders by start time and cuts
// one page after the token. Native paging only runs in creation order, so
// every page reads the whole filtered listing (bounded by the project's
// live sandboxes). q.Limit 0 means everything.
func (h *Handler) answerList(ctx context.Context, w http.ResponseWriter, c *client.Client, q listQuery) error {
	var states []model.SandboxState
	for _, s := range q.States {
		states = append(states, nativeStates(s)...)
	}
	nq := client.ListSandboxesQuery{States: states, Limit: 1000}
	for k, v := range q.Metadata {
		if k == templateKey {
			return badRequest("metadata key %q is reserved", templateKey)
		}
		if _, _, err := model.ParseMetadataFilter(k + "=" + v); err != nil {
			// No sandbox can carry such a key or value.
			writeJSON(w, http.StatusOK, []listedOut{})
			return nil
		}
		nq.Metadata = append(nq.Metadata, client.MetadataFilter{Key: k, Value: v})
	}
	slices.SortFunc(nq.Metadata, func(a, b client.MetadataFilter) int { return cmp.Compare(a.Key, b.Key) })
	all, err := c.ListAllSandboxes(ctx, nq)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	items := make([]listedOut, 0, len(all.Sandboxes))
	for _, sb := range all.Sandboxes {
		st, ok := e2bStateOf(model.SandboxState(sb.State))
		if !ok || !q.StartedAfter.IsZero() && !sb.CreatedAt.After(q.StartedAfter) {
			continue
		}
		if q.Template != "" && q.Template != templateIDOf(sb) && q.Template != sb.Template {
			continue
		}
		items = append(items, listed(sb, st))
	}
	page, next := paginate(items, q)
	if next != nil {
		w.Header().Set("X-Next-Token", next.encode())
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// paginate orders items by (start, ID) in q.Order and returns the page
// after q.After, with the token of the next page (nil on the last).
func paginate(items []listedOut, q listQuery) ([]listedOut, *pageToken) {
	key := func(a listedOut) pageToken {
		return pageToken{Order: q.Order, StartedAt: a.StartedAt, ID: model.SandboxID(a.SandboxID)}
	}
	compare := func(a, b pageToken) int {
		c := a.StartedAt.Compare(b.StartedAt)
		if c == 0 {
			c = cmp.Compare(a.ID, b.ID)
		}
		if q.Order == orderDesc {
			c = -c
		}
		return c
	}
	slices.SortFunc(items, func(a, b listedOut) int { return compare(key(a), key(b)) })
	if q.After != nil {
		i, _ := slices.BinarySearchFunc(items, *q.After, func(it listedOut, t pageToken) int {
			if compare(key(it), t) <= 0 {
				return -1
			}
			return 1
		})
		items = items[i:]
	}
	if q.Limit <= 0 || len(items) <= q.Limit {
		return items, nil
	}
	last := key(items[q.Limit-1])
	return items[:q.Limit], &last
}
