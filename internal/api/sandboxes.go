package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// createSandbox: POST /v1/sandboxes → 202 SandboxWithOperation (201 for
// a sandbox claimed from a warm pool, already running).
func (a *API) createSandbox(ctx context.Context, c *call[createSandboxBody]) (*reply, error) {
	in := apiv1.CreateSandboxRequest(c.in)
	req := sandboxes.CreateRequest{Project: c.p.project, Template: model.RefByName(model.DefaultTemplate), Now: c.now}
	var err error
	if c.present["template"] {
		if req.Template, err = model.ParseTemplateRef(in.Template); err != nil {
			return nil, err
		}
	}
	req.Resources = a.cfg.Sandboxes.DefaultResources()
	if c.present["cpus"] {
		req.Resources.CPUs = in.CPUs
	}
	if c.present["memory_mib"] {
		req.Resources.MemoryMiB = in.MemoryMiB
	}
	if c.present["disk_mib"] {
		req.Resources.DiskMiB = in.DiskMiB
	}
	if req.Env, err = model.ParseEnv(in.Env); err != nil {
		return nil, err
	}
	if req.Metadata, err = model.ParseMetadata(in.Metadata); err != nil {
		return nil, err
	}
	if err := checkReservedMetadata(ctx, req.Metadata); err != nil {
		return nil, err
	}
	// createTimeouts reads the request as its wire type.
	if req.Timeouts, err = a.createTimeouts(&call[apiv1.CreateSandboxRequest]{r: c.r, p: c.p, in: in, present: c.present, now: c.now}); err != nil {
		return nil, err
	}
	if in.Egress != nil {
		if req.Egress, err = a.parseSandboxEgress(c.p.project, *in.Egress); err != nil {
			return nil, err
		}
	}
	if req.NodeSelector, err = model.ParseNodeLabels(in.NodeSelector); err != nil {
		return nil, fmt.Errorf("node_selector: %w", err)
	}
	req.PublicPorts = in.PublicPorts
	if req.Volumes, err = parseVolumeMounts(in.VolumeMounts); err != nil {
		return nil, err
	}
	if c.present["snapshot"] {
		if req.Snapshot, err = model.ParseSnapshotID(in.Snapshot); err != nil {
			return nil, err
		}
		for _, f := range []string{"template", "cpus", "memory_mib", "disk_mib", "environment", "node_selector"} {
			if c.present[f] {
				return nil, badRequest("%s cannot be given with snapshot: a sandbox made from a snapshot has the snapshot's", f)
			}
		}
	}
	if c.present["environment"] {
		sel, err := environment.ParseSelector(in.Environment)
		if err != nil {
			return nil, errorf(apiv1.CodeEnvironmentUnknown, "environment: %s", err.Error())
		}
		req.Environment = &sel
	}
	// The answer is encoded before the store call so that the idempotency
	// record is written in the same transaction.
	var rep *reply
	req.Idempotency = func(cr sandboxes.Created) (*store.IdempotencyRecord, error) {
		out := sandboxOut(cr.Sandbox)
		egressOut := egressPolicyOut(cr.Egress)
		out.Egress = &egressOut
		status := http.StatusAccepted
		if cr.FromPool {
			status = http.StatusCreated
		}
		r, rec, err := c.reply(status, apiv1.SandboxWithOperation{Sandbox: out, Operation: operationOut(cr.Operation)})
		rep = r
		return rec, err
	}
	cr, err := a.cfg.Sandboxes.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	c.created(cr.Sandbox.ID.String())
	return rep, nil
}

// listSandboxes: GET /v1/sandboxes → 200 SandboxList.
func (a *API) listSandboxes(w http.ResponseWriter, r *http.Request, p principal) {
	q, err := parseSandboxQuery(p.project, r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out, err := a.sandboxList(r.Context(), q)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// sandboxList is the body of GET /v1/sandboxes for query q.
func (a *API) sandboxList(ctx context.Context, q store.SandboxQuery) (apiv1.SandboxList, error) {
	page, err := a.stores.sandboxes.ListSandboxes(ctx, q)
	if err != nil {
		return apiv1.SandboxList{}, fmt.Errorf("list sandboxes: %w", err)
	}
	out := apiv1.SandboxList{Sandboxes: make([]apiv1.Sandbox, 0, len(page.Sandboxes))}
	for _, sb := range page.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, sandboxOut(sb))
	}
	if page.Next != nil {
		out.NextCursor = encodeCursor(*page.Next)
	}
	return out, nil
}

// sandboxOf loads a sandbox of the caller's project named by the {id} path value.
func (a *API) sandboxOf(ctx context.Context, r *http.Request, p principal) (model.Sandbox, error) {
	id, err := model.ParseSandboxID(r.PathValue("id"))
	if err != nil {
		return model.Sandbox{}, err
	}
	sb, err := a.stores.sandboxes.GetSandbox(ctx, p.project, id)
	if errors.Is(err, store.ErrNotFound) {
		return model.Sandbox{}, notFound("sandbox %s not found", id)
	}
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// getSandbox: GET /v1/sandboxes/{id} → 200 Sandbox.
func (a *API) getSandbox(w http.ResponseWriter, r *http.Request, p principal) {
	sb, err := a.sandboxOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	spec, err := a.stores.sandboxes.GetSandboxEgress(r.Context(), p.project, sb.ID)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("get egress of %s: %w", sb.ID, err))
		return
	}
	out := sandboxOut(sb)
	egressOut := egressPolicyOut(spec)
	out.Egress = &egressOut
	writeJSON(w, http.StatusOK, out)
}

// deleteSandbox: DELETE /v1/sandboxes/{id} → 202 OperationResponse.
func (a *API) deleteSandbox(ctx context.Context, c *call[noBody]) (*reply, error) {
	id, err := model.ParseSandboxID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var rep *reply
	_, err = a.cfg.Sandboxes.Delete(ctx, sandboxes.DeleteRequest{Project: c.p.project, Sandbox: id, Now: c.now,
		Idempotency: func(op model.Operation) (*store.IdempotencyRecord, error) {
			r, rec, err := c.reply(http.StatusAccepted, apiv1.OperationResponse{Operation: operationOut(op)})
			rep = r
			return rec, err
		}})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// withSandboxEnv is a command's environment: the sandbox's env with the
// command's own replacing it name by name. A sandbox's env is set at its
// create; one claimed from a warm pool was started before, so its guest
// agent does not have it and every command carries it.
func withSandboxEnv(sandbox, command model.Env) model.Env {
	if len(sandbox) == 0 {
		return command
	}
	env := make(model.Env, len(sandbox)+len(command))
	for k, v := range sandbox {
		env[k] = v
	}
	for k, v := range command {
		env[k] = v
	}
	return env
}

// Bounds of a command's argv.
const (
	maxArgs      = 4096
	maxArgsBytes = 256 * 1024
)

// parseArgs checks a command's argv: at least one argument, the first not
// empty, all valid UTF-8 without NUL.
func parseArgs(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, badRequest("args must name the program to run: at least one argument")
	}
	if len(args) > maxArgs {
		return nil, badRequest("at most %d args", maxArgs)
	}
	if args[0] == "" {
		return nil, badRequest("args[0], the program, must not be empty")
	}
	total := 0
	for i, s := range args {
		total += len(s)
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return nil, badRequest("args[%d] must be valid UTF-8 without NUL", i)
		}
	}
	if total > maxArgsBytes {
		return nil, badRequest("args add up to more than %d bytes", maxArgsBytes)
	}
	return args, nil
}

// createCommand: POST /v1/sandboxes/{id}/commands → 201 CommandSession.
func (a *API) createCommand(ctx context.Context, c *call[apiv1.CreateCommandRequest]) (*reply, error) {
	var args []string // none: the template's default command
	var err error
	if len(c.in.Args) > 0 {
		if args, err = parseArgs(c.in.Args); err != nil {
			return nil, err
		}
	}
	env, err := model.ParseEnv(c.in.Env)
	if err != nil {
		return nil, err
	}
	var cwd model.GuestPath
	if c.present["cwd"] {
		if cwd, err = model.ParseGuestPath(c.in.Cwd); err != nil {
			return nil, err
		}
	}
	spec := model.ProcessSpec{Args: args, Env: env, Cwd: cwd, Stdin: c.in.Stdin}
	if c.in.PTY != nil {
		ts, err := model.ParseTermSize(c.in.PTY.Rows, c.in.PTY.Cols)
		if err != nil {
			return nil, err
		}
		spec.PTY = &ts
	}
	if c.in.User != nil {
		u, err := model.ParseUserIDs(c.in.User.UID, c.in.User.GID)
		if err != nil {
			return nil, err
		}
		spec.User = &u
	}
	if c.in.TimeoutSecs < 0 || time.Duration(c.in.TimeoutSecs)*time.Second > model.MaxProcessTimeout {
		return nil, badRequest("timeout_secs must be 0–%d", int(model.MaxProcessTimeout/time.Second))
	}
	spec.Timeout = time.Duration(c.in.TimeoutSecs) * time.Second
	sb, err := a.sandboxOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	if c.in.Resume {
		if sb, err = a.cfg.Sandboxes.RunFirst(ctx, c.p.project, sb); err != nil {
			return nil, err
		}
	}
	if sb.State != model.StateRunning {
		return nil, notRunning(sb)
	}
	if err := a.applyTemplateDefaults(&spec, sb.Template); err != nil {
		return nil, err
	}
	spec.Env = withSandboxEnv(sb.Env, spec.Env)
	cs := model.CommandSession{
		ID:        model.NewCommandSessionID(),
		ProjectID: c.p.project,
		SandboxID: sb.ID,
		ProcessID: model.NewProcessID(),
		Spec:      spec,
		CreatedAt: c.now,
	}
	token, exp, err := a.issueAttachment(sb, cs, auth.AllActions(), c.now)
	if err != nil {
		return nil, err
	}
	// The row keeps the first token's expiry and SHA-256 as a record of what
	// was issued; tokens are checked by their signature, never against it.
	cs.ExpiresAt = exp
	cs.TokenHash = auth.HashSecret([]byte(token))
	rep, rec, err := c.reply(http.StatusCreated, a.commandSessionOut(c.r, cs, token, exp))
	if err != nil {
		return nil, err
	}
	var guest guestops.Guest
	if c.in.Background {
		// Find the guest before writing anything: a sandbox that cannot
		// run the command now gets no session.
		if _, guest, err = a.guestOf(ctx, c.r, c.p); err != nil {
			return nil, err
		}
	}
	if err := a.stores.sandboxes.CreateCommandSession(ctx, cs, rec); err != nil {
		return nil, fmt.Errorf("create command session: %w", err)
	}
	if guest != nil {
		if err := guest.Start(ctx, cs, false); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// checkReservedMetadata refuses metadata keys the server keeps for itself
// (model.ReservedMetadataKey: e2b.airlock/…, airlock/…) unless the request
// is the server's own, sent in-process (the E2B API records the templateID
// its caller named under e2b.airlock/template-id). Only InProcess.RoundTrip
// marks a request so, in a context it makes: no header, flag or token a
// client sends over the network can.
func checkReservedMetadata(ctx context.Context, md model.Metadata) error {
	if inProcessFrom(ctx) != nil {
		return nil
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		if model.ReservedMetadataKey(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	return badRequest("metadata key %q is reserved for the server's own use (keys starting with e2b.airlock/ or airlock/)", keys[0])
}
