package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// snapshotRoutes are the saved snapshots and forks.
func (a *API) snapshotRoutes() []route {
	return []route{
		{"POST", "/v1/sandboxes/{id}/snapshots", member, mutating(a, a.createSnapshot)},
		{"POST", "/v1/sandboxes/{id}/fork", member, mutating(a, a.forkSandbox)},
		{"GET", "/v1/snapshots", member, a.listSnapshots},
		{"GET", "/v1/snapshots/{id}", member, a.getSnapshot},
		{"DELETE", "/v1/snapshots/{id}", member, mutating(a, a.deleteSnapshot)},
	}
}

// snapshotRecordOut is the wire form of a saved snapshot.
func snapshotRecordOut(r model.SnapshotRecord) apiv1.SavedSnapshot {
	return apiv1.SavedSnapshot{
		ID: r.ID.String(), Name: r.Name.String(), State: string(r.State), Storage: r.Storage.String(), Error: r.Error, SourceSandboxID: r.Source.String(),
		Kind: string(r.Kind), Runtime: r.Runtime, Environment: string(r.Environment), NodeID: string(r.NodeID),
		Template: r.Template.String(), CPUs: r.Resources.CPUs, MemoryMiB: r.Resources.MemoryMiB, DiskMiB: r.Resources.DiskMiB,
		SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

// createSnapshot: POST /v1/sandboxes/{id}/snapshots → 202
// SnapshotWithOperation: the snapshot (creating) and its operation; the
// sandbox is snapshotting, then running again. Refused as a lifecycle
// request is (404, 409 sandbox_busy or invalid_transition, 501).
func (a *API) createSnapshot(ctx context.Context, c *call[snapshotBody]) (*reply, error) {
	id, err := model.ParseSandboxID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var name model.SnapshotName
	if c.present["name"] {
		if name, err = model.ParseSnapshotName(c.in.Name); err != nil {
			return nil, err
		}
	}
	var rep *reply
	ch, err := a.cfg.Sandboxes.Snapshot(ctx, sandboxes.SnapshotRequest{Project: c.p.project, Sandbox: id, Name: name, Now: c.now,
		Idempotency: func(ch sandboxes.SnapshotChanged) (*store.IdempotencyRecord, error) {
			r, rec, err := c.reply(http.StatusAccepted, apiv1.SnapshotWithOperation{Snapshot: snapshotRecordOut(ch.Snapshot), Operation: operationOut(ch.Operation)})
			rep = r
			return rec, err
		}})
	if err != nil {
		return nil, err
	}
	c.created(ch.Snapshot.ID.String())
	return rep, nil
}

// snapshotBody is the optional body of createSnapshot: none is a
// snapshot without a name.
type snapshotBody apiv1.SnapshotRequest

func (snapshotBody) optionalBody() {}

// forkBody is the optional body of forkSandbox: none is one sandbox.
type forkBody apiv1.ForkRequest

func (forkBody) optionalBody() {}

// forkSandbox: POST /v1/sandboxes/{id}/fork {"count": N} → 202
// ForkResult: N new sandboxes (pending) continuing from the sandbox at
// the moment of the fork, and their create operations. The request waits
// for the fork's snapshot (the source runs on). Refused: 400 for a count
// outside 1..16, 403 quota_exceeded when the quota does not admit all N
// (none is made), 404, 409, 501 as a snapshot is.
func (a *API) forkSandbox(ctx context.Context, c *call[forkBody]) (*reply, error) {
	id, err := model.ParseSandboxID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	count := c.in.Count
	if !c.present["count"] {
		count = 1
	}
	if err := model.CheckForkCount(count); err != nil {
		return nil, err
	}
	md, err := model.ParseMetadata(c.in.Metadata)
	if err != nil {
		return nil, err
	}
	if err := checkReservedMetadata(ctx, md); err != nil {
		return nil, err
	}
	// The answer is encoded before the store call so that the idempotency
	// record is written in the forks' transaction: a retry never forks
	// twice.
	var rep *reply
	idem := func(made []sandboxes.Created) (*store.IdempotencyRecord, error) {
		out := apiv1.ForkResult{Sandboxes: make([]apiv1.SandboxWithOperation, 0, len(made))}
		for _, cr := range made {
			out.Sandboxes = append(out.Sandboxes, apiv1.SandboxWithOperation{Sandbox: sandboxOut(cr.Sandbox), Operation: operationOut(cr.Operation)})
		}
		r, rec, err := c.reply(http.StatusAccepted, out)
		rep = r
		return rec, err
	}
	if _, err := a.cfg.Sandboxes.Fork(ctx, sandboxes.ForkRequest{Project: c.p.project, Sandbox: id, Count: count, Metadata: md, Now: c.now, Idempotency: idem}); err != nil {
		return nil, err
	}
	return rep, nil
}

// getSnapshot: GET /v1/snapshots/{id} → 200 SavedSnapshot; another
// project's is 404 snapshot_not_found, as one that does not exist.
func (a *API) getSnapshot(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := model.ParseSnapshotID(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	rec, err := a.cfg.Sandboxes.GetSnapshot(r.Context(), p.project, id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotRecordOut(rec))
}

// deleteSnapshot: DELETE /v1/snapshots/{id} → 202 SavedSnapshot
// (deleting): its node removes its files once no sandbox is being made
// from it, then the record. 409 sandbox_busy while it is being made.
func (a *API) deleteSnapshot(ctx context.Context, c *call[noBody]) (*reply, error) {
	id, err := model.ParseSnapshotID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	rec, err := a.cfg.Sandboxes.DeleteSnapshot(ctx, c.p.project, id, c.now)
	if err != nil {
		return nil, err
	}
	return idempotentReply(ctx, a, c, http.StatusAccepted, snapshotRecordOut(rec))
}

// listSnapshots: GET /v1/snapshots[?limit=&cursor=] → 200 SnapshotList,
// the project's snapshots oldest first (forks' are not listed).
func (a *API) listSnapshots(w http.ResponseWriter, r *http.Request, p principal) {
	q, err := parseSnapshotQuery(p.project, r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	page, err := a.cfg.Sandboxes.ListSnapshots(r.Context(), q)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := apiv1.SnapshotList{Snapshots: make([]apiv1.SavedSnapshot, 0, len(page.Snapshots))}
	for _, s := range page.Snapshots {
		out.Snapshots = append(out.Snapshots, snapshotRecordOut(s))
	}
	if page.Next != nil {
		out.NextCursor = encodeTimeCursor(page.Next.CreatedAt, page.Next.ID.String())
	}
	writeJSON(w, http.StatusOK, out)
}

func parseSnapshotQuery(project model.ProjectID, q url.Values) (store.SnapshotQuery, error) {
	sq := store.SnapshotQuery{ProjectID: project, Limit: defaultListLimit}
	for name, vals := range q {
		switch name {
		case "limit":
			if len(vals) != 1 {
				return sq, badRequest("give limit once")
			}
			n, err := strconv.Atoi(vals[0])
			if err != nil || n < 1 || n > maxListLimit {
				return sq, badRequest("limit must be an integer from 1 to %d", maxListLimit)
			}
			sq.Limit = n
		case "cursor":
			if len(vals) != 1 {
				return sq, badRequest("give cursor once")
			}
			at, id, err := decodeTimeCursor(vals[0], model.ParseSnapshotID)
			if err != nil {
				return sq, err
			}
			sq.After = &store.SnapshotCursor{CreatedAt: at, ID: id}
		case "name":
			if len(vals) != 1 {
				return sq, badRequest("give name once")
			}
			n, err := model.ParseSnapshotName(vals[0])
			if err != nil {
				return sq, err
			}
			sq.Name = n
		default:
			return sq, badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
		}
	}
	return sq, nil
}
