package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// E2B treats a snapshot as a template: SnapshotInfo{snapshotID, names},
// deleted through DELETE /templates/{templateID} and started with
// Sandbox.create(snapshotID). Here a snapshot is a native saved snapshot
// (snp_…): its snapshotID is its native ID, and names holds its native
// name, if it has one (names are not unique: E2B's reuse of a name for a
// new build of the same template is a second snapshot of that name).

// snapshotTag is the tag E2B appends to a snapshot template's ID
// ("abc123:default"); an ID given with it names the same snapshot.
const snapshotTag = ":default"

// maxSnapshotScan bounds how many native snapshots a listing reads.
const maxSnapshotScan = 10000

// E2B's snapshot and fork wire types.
type (
	snapshotIn struct {
		Name *string `json:"name"`
	}
	snapshotInfoOut struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	forkIn struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	// forkResultOut: exactly one of Sandbox and Error.
	forkResultOut struct {
		Sandbox *sandboxOut `json:"sandbox,omitempty"`
		Error   *errorBody  `json:"error,omitempty"`
	}
)

// forkDefaultTimeout is E2B's default lifetime of a fork, in seconds.
const forkDefaultTimeout = 15

// parseSnapshotRef parses an E2B template ID as a snapshot: a snp_ ID,
// optionally with E2B's ":default" tag. ok is false for anything else (a
// template).
func parseSnapshotRef(s string) (model.SnapshotID, bool) {
	s = strings.TrimSuffix(strings.TrimSpace(s), snapshotTag)
	id, err := model.ParseSnapshotID(s)
	return id, err == nil
}

func snapshotInfo(s apiv1.SavedSnapshot) snapshotInfoOut {
	names := []string{}
	if s.Name != "" {
		names = append(names, s.Name)
	}
	return snapshotInfoOut{SnapshotID: s.ID, Names: names}
}

// snapshotFilter is the name filter of E2B's snapshot listing: a snapshot
// ID, or a name, optionally team-qualified ("team/name") and tagged
// (":default", the only tag a snapshot has). ok is false when it can
// match nothing.
type snapshotFilter struct {
	id   model.SnapshotID
	name model.SnapshotName
}

func parseSnapshotFilter(s string) (f snapshotFilter, ok bool) {
	if id, isID := parseSnapshotRef(s); isID {
		return snapshotFilter{id: id}, true
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	if base, tag, tagged := strings.Cut(s, ":"); tagged {
		if ":"+tag != snapshotTag {
			return f, false
		}
		s = base
	}
	n, err := model.ParseSnapshotName(s)
	if err != nil {
		return f, false
	}
	return snapshotFilter{name: n}, true
}

// snapshotNotFound is E2B's 404 for a snapshot (template) ID.
func snapshotNotFound(id string) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("snapshot %q not found", textclip.Bytes(id, maxEcho))}
}

// createSnapshot: POST /sandboxes/{id}/snapshots {name?} → 201
// SnapshotInfo once the native snapshot is ready (the sandbox runs on).
func (h *Handler) createSnapshot(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in snapshotIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	var req apiv1.SnapshotRequest
	if in.Name != nil && *in.Name != "" {
		n, err := model.ParseSnapshotName(*in.Name)
		if err != nil {
			return badRequest("name: %v", err)
		}
		req.Name = n.String()
	}
	if _, _, err := lookup(ctx, c, id); err != nil {
		return err
	}
	res, err := c.SnapshotSandbox(ctx, id, req)
	if err != nil {
		if client.IsCode(err, apiv1.CodeNotFound) {
			return notFound(id)
		}
		return fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	if err := waitOp(ctx, c, res.Operation); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotInfo(res.Snapshot))
	return nil
}

// listSnapshots: GET /snapshots?sandboxID&name&limit&nextToken → 200
// [SnapshotInfo], X-Next-Token. Only ready snapshots are listed; name
// filters by snapshot ID or name (parseSnapshotFilter). nextToken is the
// last ID of the previous page.
func (h *Handler) listSnapshots(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	q := r.URL.Query()
	limit, err := parseLimit(q["limit"])
	if err != nil {
		return badRequest("%v", err)
	}
	sbx := q.Get("sandboxID")
	var filter snapshotFilter
	if name := q.Get("name"); name != "" {
		f, ok := parseSnapshotFilter(name)
		if !ok {
			writeJSON(w, http.StatusOK, []snapshotInfoOut{})
			return nil
		}
		filter = f
	}
	after := q.Get("nextToken")
	if after != "" {
		if _, ok := parseSnapshotRef(after); !ok {
			return badRequest("nextToken is not one this server issued")
		}
	}
	var all []apiv1.SavedSnapshot
	cursor := ""
	for {
		page, err := c.ListSnapshots(ctx, filter.name.String(), 0, cursor)
		if err != nil {
			return fmt.Errorf("list snapshots: %w", err)
		}
		for _, s := range page.Snapshots {
			if s.State != string(model.SnapshotReady) ||
				(sbx != "" && s.SourceSandboxID != sbx) ||
				(filter.id != "" && s.ID != filter.id.String()) {
				continue
			}
			all = append(all, s)
		}
		if page.NextCursor == "" || len(all) >= maxSnapshotScan {
			break
		}
		cursor = page.NextCursor
	}
	start := 0
	if after != "" {
		start = len(all)
		for i, s := range all {
			if s.ID == after {
				start = i + 1
				break
			}
		}
	}
	end := min(start+limit, len(all))
	out := make([]snapshotInfoOut, 0, end-start)
	for _, s := range all[start:end] {
		out = append(out, snapshotInfo(s))
	}
	if end < len(all) && end > start {
		w.Header().Set("X-Next-Token", all[end-1].ID)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate: DELETE /templates/{id}. A snapshot's ID deletes the
// snapshot (204; 404 if the project has none such, or it is already being
// deleted); templates are not managed through E2B's API (501).
func (h *Handler) deleteTemplate(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	raw := r.PathValue("id")
	id, ok := parseSnapshotRef(raw)
	if !ok {
		return notImplemented("DELETE /templates/%s is not supported by Airlock's E2B API: only snapshots are deleted through it", textclip.Bytes(raw, maxEcho))
	}
	s, err := c.GetSnapshot(ctx, id)
	if err != nil {
		if client.IsCode(err, apiv1.CodeSnapshotNotFound) {
			return snapshotNotFound(raw)
		}
		return fmt.Errorf("get snapshot %s: %w", id, err)
	}
	if s.State == string(model.SnapshotDeleting) {
		return snapshotNotFound(raw)
	}
	if _, err := c.DeleteSnapshot(ctx, id); err != nil {
		if client.IsCode(err, apiv1.CodeSnapshotNotFound) {
			return snapshotNotFound(raw)
		}
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fork: POST /sandboxes/{id}/fork {count, timeout} → 201
// [SandboxForkResult], one per fork: the native fork (all of them admitted
// at once, or the request fails), then each fork waited for on its own; a
// fork that failed to start is deleted and reported in its entry.
func (h *Handler) fork(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in forkIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	count := 1
	if in.Count != nil {
		count = *in.Count
	}
	if err := model.CheckForkCount(count); err != nil {
		return badRequest("%v", err)
	}
	timeout, err := parseTimeout(in.Timeout, forkDefaultTimeout)
	if err != nil {
		return err
	}
	src, _, err := lookup(ctx, c, id)
	if err != nil {
		return err
	}
	req := apiv1.ForkRequest{Count: count}
	if tpl := src.Metadata[templateKey]; tpl != "" {
		req.Metadata = map[string]string{templateKey: tpl}
	}
	res, err := c.ForkSandbox(ctx, id, req)
	if err != nil {
		if client.IsCode(err, apiv1.CodeNotFound) {
			return notFound(id)
		}
		return fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	out := make([]forkResultOut, len(res.Sandboxes))
	var wg sync.WaitGroup
	for i, made := range res.Sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = h.startFork(ctx, c, made, timeout)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// startFork waits for one fork to run, gives it its E2B timeout and
// answers its entry; a fork that did not start is deleted.
func (h *Handler) startFork(ctx context.Context, c *client.Client, made apiv1.SandboxWithOperation, timeout int64) forkResultOut {
	id := model.SandboxID(made.Sandbox.ID)
	sbx, err := func() (sandboxOut, error) {
		if err := waitOp(ctx, c, made.Operation); err != nil {
			return sandboxOut{}, err
		}
		if _, err := c.SetSandboxTimeout(ctx, id, apiv1.SetTimeoutRequest{Timeout: timeout, OnTimeout: string(model.OnTimeoutDelete)}); err != nil {
			return sandboxOut{}, fmt.Errorf("set timeout of %s: %w", id, err)
		}
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return sandboxOut{}, fmt.Errorf("get sandbox %s: %w", id, err)
		}
		return h.sandboxReply(ctx, sb)
	}()
	if err == nil {
		return forkResultOut{Sandbox: &sbx}
	}
	if ctx.Err() == nil {
		if _, derr := c.DeleteSandbox(context.WithoutCancel(ctx), id); derr != nil {
			h.log.Warn("e2b control: delete after failed fork", "sandbox", id, "err", derr)
		}
	}
	status := http.StatusInternalServerError
	var ae *client.APIError
	var of *client.OperationFailedError
	switch {
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status <= 599:
		status = ae.Status
	case errors.As(err, &of):
		status = failedOpStatus(of.Operation)
	}
	h.log.Warn("e2b control: fork did not start", "sandbox", id, "err", err)
	return forkResultOut{Error: &errorBody{Code: status, Message: "fork " + id.String() + ": " + err.Error()}}
}
