package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/model"
)

// fileRoutes are the management-plane file routes: small operations are
// answered directly through the sandbox's agent; bytes flow on the data
// plane under a transfer token from POST …/files/transfers.
func (a *API) fileRoutes() []route {
	return []route{
		{"GET", "/v1/sandboxes/{id}/files/stat", member, a.statFile},
		{"GET", "/v1/sandboxes/{id}/files/list", member, a.listFiles},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", member, mutating(a, a.mkdirFile)},
		{"POST", "/v1/sandboxes/{id}/files/move", member, mutating(a, a.moveFile)},
		{"POST", "/v1/sandboxes/{id}/files/remove", member, mutating(a, a.removeFile)},
		{"POST", "/v1/sandboxes/{id}/files/transfers", member, mutating(a, a.createTransfer)},
	}
}

// fileAgent returns the agent of the caller's running sandbox {id}.
func (a *API) fileAgent(ctx context.Context, r *http.Request, p principal) (model.Sandbox, *agentclient.Client, error) {
	if a.cfg.Agents == nil || a.cfg.FileTokens == nil {
		return model.Sandbox{}, nil, errorf(http.StatusNotImplemented, apiv1.CodeNotSupported, "this server has no file access to sandboxes")
	}
	return a.agentOf(ctx, r, p)
}

// agentFileError turns an agent error into the API's error.
func agentFileError(err error) error {
	status, code, msg := dataplane.FileError(err)
	return errorf(status, code, "%s", msg)
}

// parsePathField parses a guest path from a body field or query parameter.
func parsePathField(name, s string) (model.GuestPath, error) {
	p, err := model.ParseGuestPath(s)
	if err != nil {
		return "", errorf(http.StatusBadRequest, apiv1.CodeInvalidPath, "%s: %v", name, err)
	}
	return p, nil
}

// queryPath parses ?path=, the only query parameter of the file GETs.
func queryPath(r *http.Request) (model.GuestPath, error) {
	q := r.URL.Query()
	for name := range q {
		if name != "path" {
			return "", badRequest("unknown query parameter %q", truncate(name))
		}
	}
	if len(q["path"]) != 1 {
		return "", errorf(http.StatusBadRequest, apiv1.CodeInvalidPath, "give the path query parameter once")
	}
	return parsePathField("path", q.Get("path"))
}

// statFile: GET /v1/sandboxes/{id}/files/stat?path= → 200 FileInfo.
func (a *API) statFile(w http.ResponseWriter, r *http.Request, p principal) {
	err := func() error {
		path, err := queryPath(r)
		if err != nil {
			return err
		}
		_, agent, err := a.fileAgent(r.Context(), r, p)
		if err != nil {
			return err
		}
		fi, err := agent.Stat(r.Context(), path.String())
		if err != nil {
			return agentFileError(err)
		}
		writeJSON(w, http.StatusOK, dataplane.FileInfoOut(fi))
		return nil
	}()
	if err != nil {
		a.writeError(w, r, err)
	}
}

// listFiles: GET /v1/sandboxes/{id}/files/list?path= → 200 FileList.
func (a *API) listFiles(w http.ResponseWriter, r *http.Request, p principal) {
	err := func() error {
		path, err := queryPath(r)
		if err != nil {
			return err
		}
		_, agent, err := a.fileAgent(r.Context(), r, p)
		if err != nil {
			return err
		}
		l, err := agent.ListDir(r.Context(), path.String())
		if err != nil {
			return agentFileError(err)
		}
		out := apiv1.FileList{Path: l.Path, Entries: make([]apiv1.FileInfo, 0, len(l.Entries)), Truncated: l.Truncated}
		for _, fi := range l.Entries {
			out.Entries = append(out.Entries, dataplane.FileInfoOut(fi))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}()
	if err != nil {
		a.writeError(w, r, err)
	}
}

// fileReply answers a mutating file call and stores its idempotency record
// (the agent did the work; a repeat with the same key replays this answer).
func fileReply[T any](ctx context.Context, a *API, c *call[T], status int, v any) (*reply, error) {
	rep, rec, err := c.reply(status, v)
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}

// mkdirFile: POST /v1/sandboxes/{id}/files/mkdir → 200 FileInfo (mkdir -p).
func (a *API) mkdirFile(ctx context.Context, c *call[apiv1.MkdirRequest]) (*reply, error) {
	path, err := parsePathField("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	_, agent, err := a.fileAgent(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	fi, err := agent.Mkdir(ctx, agentproto.MkdirRequest{Path: path.String()})
	if err != nil {
		return nil, agentFileError(err)
	}
	return fileReply(ctx, a, c, http.StatusOK, dataplane.FileInfoOut(fi))
}

// moveFile: POST /v1/sandboxes/{id}/files/move → 200 FileInfo of the destination.
func (a *API) moveFile(ctx context.Context, c *call[apiv1.MoveRequest]) (*reply, error) {
	from, err := parsePathField("from", c.in.From)
	if err != nil {
		return nil, err
	}
	to, err := parsePathField("to", c.in.To)
	if err != nil {
		return nil, err
	}
	_, agent, err := a.fileAgent(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	if err := agent.Move(ctx, agentproto.MoveRequest{From: from.String(), To: to.String(), Overwrite: c.in.Overwrite}); err != nil {
		return nil, agentFileError(err)
	}
	fi, err := agent.Stat(ctx, to.String())
	if err != nil {
		return nil, agentFileError(err)
	}
	return fileReply(ctx, a, c, http.StatusOK, dataplane.FileInfoOut(fi))
}

// removeFile: POST /v1/sandboxes/{id}/files/remove → 200 RemoveResponse.
func (a *API) removeFile(ctx context.Context, c *call[apiv1.RemoveRequest]) (*reply, error) {
	path, err := parsePathField("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	_, agent, err := a.fileAgent(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	if err := agent.Remove(ctx, agentproto.RemoveRequest{Path: path.String(), Recursive: c.in.Recursive}); err != nil {
		return nil, agentFileError(err)
	}
	return fileReply(ctx, a, c, http.StatusOK, apiv1.RemoveResponse{Path: path.String()})
}

// createTransfer: POST /v1/sandboxes/{id}/files/transfers → 201 Transfer,
// a short-lived authorization for one byte stream on the data plane.
func (a *API) createTransfer(ctx context.Context, c *call[apiv1.CreateTransferRequest]) (*reply, error) {
	path, err := parsePathField("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	method := apiv1.TransferMethod(c.in.Direction)
	if method == "" {
		return nil, badRequest("direction must be download, upload, tar-out, tar-in or watch")
	}
	sb, _, err := a.fileAgent(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	iat := c.now.Truncate(time.Second)
	exp := iat.Add(auth.FileTokenTTL)
	tok, err := a.cfg.FileTokens.IssueFile(auth.FileClaims{Sandbox: sb.ID, Path: path, Direction: c.in.Direction, IssuedAt: iat, ExpiresAt: exp})
	if err != nil {
		return nil, fmt.Errorf("issue file token: %w", err)
	}
	return fileReply(ctx, a, c, http.StatusCreated, apiv1.Transfer{
		URL:       a.baseURL(c.r) + apiv1.FilesDataPath(sb.ID.String(), c.in.Direction),
		Method:    method,
		Token:     tok,
		ExpiresAt: exp,
		Path:      path.String(),
		Direction: c.in.Direction,
	})
}
