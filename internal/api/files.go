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
	"github.com/airlockdev/airlock/internal/procctl"
	"github.com/airlockdev/airlock/internal/textclip"
)

// fileRoutes are the management-plane file routes: small operations are
// answered directly through the sandbox's agent; bytes flow on the data
// plane under a transfer token from POST …/files/transfers.
func (a *API) fileRoutes() []route {
	return []route{
		{"GET", "/v1/sandboxes/{id}/files/stat", member | sandboxToken, a.hosted(a.statFile)},
		{"GET", "/v1/sandboxes/{id}/files/list", member | sandboxToken, a.hosted(a.listFiles)},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", member | sandboxToken, a.hosted(mutating(a, a.mkdirFile))},
		{"POST", "/v1/sandboxes/{id}/files/move", member | sandboxToken, a.hosted(mutating(a, a.moveFile))},
		{"POST", "/v1/sandboxes/{id}/files/remove", member | sandboxToken, a.hosted(mutating(a, a.removeFile))},
		{"POST", "/v1/sandboxes/{id}/files/transfers", member | sandboxToken, a.hosted(mutating(a, a.createTransfer))},
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

// queryPath parses ?path= and the optional ?user=<uid>:<gid>, the query
// parameters of the file GETs.
func queryPath(r *http.Request) (model.GuestPath, *model.UserIDs, error) {
	q := r.URL.Query()
	for name := range q {
		if name != "path" && name != apiv1.FileUserQuery {
			return "", nil, badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
		}
	}
	if len(q["path"]) != 1 {
		return "", nil, errorf(http.StatusBadRequest, apiv1.CodeInvalidPath, "give the path query parameter once")
	}
	p, err := parsePathField("path", q.Get("path"))
	if err != nil {
		return "", nil, err
	}
	vals, ok := q[apiv1.FileUserQuery]
	if !ok {
		return p, nil, nil
	}
	if len(vals) != 1 {
		return "", nil, badRequest("give the user query parameter at most once")
	}
	fu, err := agentproto.ParseFileUser(vals[0])
	if err != nil {
		return "", nil, badRequest("user: %v", err)
	}
	u, err := fileUser(&apiv1.User{UID: int64(fu.UID), GID: int64(fu.GID)})
	return p, u, err
}

// fileUser parses the optional user of a file request (nil: the agent's).
func fileUser(u *apiv1.User) (*model.UserIDs, error) {
	if u == nil {
		return nil, nil
	}
	ids, err := model.ParseUserIDs(u.UID, u.GID)
	if err != nil {
		return nil, badRequest("user: %v", err)
	}
	return &ids, nil
}

// fileCall runs one call on the agent of the caller's running sandbox {id},
// bounded by procctl.CallTimeout like every short agent call, and turns the
// agent's error into the API's.
func fileCall[T any](ctx context.Context, a *API, r *http.Request, p principal, do func(context.Context, *agentclient.Client) (T, error)) (T, error) {
	var zero T
	_, agent, err := a.fileAgent(ctx, r, p)
	if err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, procctl.CallTimeout)
	defer cancel()
	v, err := do(ctx, agent)
	if err != nil {
		return zero, agentFileError(err)
	}
	return v, nil
}

// fileGet answers a read-only file route: ?path= parsed, one agent call,
// its result as JSON.
func (a *API) fileGet(w http.ResponseWriter, r *http.Request, p principal, do func(context.Context, *agentclient.Client, model.GuestPath, agentclient.FileOption) (any, error)) {
	path, user, err := queryPath(r)
	if err == nil {
		var out any
		out, err = fileCall(r.Context(), a, r, p, func(ctx context.Context, agent *agentclient.Client) (any, error) {
			return do(ctx, agent, path, dataplane.AgentUser(user))
		})
		if err == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	a.writeError(w, r, err)
}

// statFile: GET /v1/sandboxes/{id}/files/stat?path= → 200 FileInfo.
func (a *API) statFile(w http.ResponseWriter, r *http.Request, p principal) {
	a.fileGet(w, r, p, func(ctx context.Context, agent *agentclient.Client, path model.GuestPath, as agentclient.FileOption) (any, error) {
		fi, err := agent.Stat(ctx, path.String(), as)
		return dataplane.FileInfoOut(fi), err
	})
}

// listFiles: GET /v1/sandboxes/{id}/files/list?path= → 200 FileList.
func (a *API) listFiles(w http.ResponseWriter, r *http.Request, p principal) {
	a.fileGet(w, r, p, func(ctx context.Context, agent *agentclient.Client, path model.GuestPath, as agentclient.FileOption) (any, error) {
		l, err := agent.ListDir(ctx, path.String(), as)
		if err != nil {
			return nil, err
		}
		out := apiv1.FileList{Path: l.Path, Entries: make([]apiv1.FileInfo, 0, len(l.Entries)), Truncated: l.Truncated}
		for _, fi := range l.Entries {
			out.Entries = append(out.Entries, dataplane.FileInfoOut(fi))
		}
		return out, nil
	})
}

// fileMutation runs a mutating file call on the agent and answers 200 with
// its result, storing the idempotency record (the agent did the work; a
// repeat with the same key replays this answer).
func fileMutation[T, R any](ctx context.Context, a *API, c *call[T], do func(context.Context, *agentclient.Client) (R, error)) (*reply, error) {
	v, err := fileCall(ctx, a, c.r, c.p, do)
	if err != nil {
		return nil, err
	}
	return idempotentReply(ctx, a, c, http.StatusOK, v)
}

// idempotentReply answers a call and stores its idempotency record.
func idempotentReply[T any](ctx context.Context, a *API, c *call[T], status int, v any) (*reply, error) {
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
	user, err := fileUser(c.in.User)
	if err != nil {
		return nil, err
	}
	return fileMutation(ctx, a, c, func(ctx context.Context, agent *agentclient.Client) (apiv1.FileInfo, error) {
		fi, err := agent.Mkdir(ctx, agentproto.MkdirRequest{Path: path.String()}, dataplane.AgentUser(user))
		return dataplane.FileInfoOut(fi), err
	})
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
	user, err := fileUser(c.in.User)
	if err != nil {
		return nil, err
	}
	as := dataplane.AgentUser(user)
	return fileMutation(ctx, a, c, func(ctx context.Context, agent *agentclient.Client) (apiv1.FileInfo, error) {
		if err := agent.Move(ctx, agentproto.MoveRequest{From: from.String(), To: to.String(), Overwrite: c.in.Overwrite}, as); err != nil {
			return apiv1.FileInfo{}, err
		}
		fi, err := agent.Stat(ctx, to.String(), as)
		return dataplane.FileInfoOut(fi), err
	})
}

// removeFile: POST /v1/sandboxes/{id}/files/remove → 200 RemoveResponse.
func (a *API) removeFile(ctx context.Context, c *call[apiv1.RemoveRequest]) (*reply, error) {
	path, err := parsePathField("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	user, err := fileUser(c.in.User)
	if err != nil {
		return nil, err
	}
	return fileMutation(ctx, a, c, func(ctx context.Context, agent *agentclient.Client) (apiv1.RemoveResponse, error) {
		err := agent.Remove(ctx, agentproto.RemoveRequest{Path: path.String(), Recursive: c.in.Recursive}, dataplane.AgentUser(user))
		return apiv1.RemoveResponse{Path: path.String()}, err
	})
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
	user, err := fileUser(c.in.User)
	if err != nil {
		return nil, err
	}
	if c.in.Resume && a.cfg.Agents != nil && a.cfg.FileTokens != nil {
		sb, err := a.sandboxOf(ctx, c.r, c.p)
		if err != nil {
			return nil, err
		}
		if _, err := a.runFirst(ctx, c.p.project, sb); err != nil {
			return nil, err
		}
	}
	sb, _, err := a.fileAgent(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	iat := c.now.Truncate(time.Second)
	exp := iat.Add(auth.FileTokenTTL)
	tok, err := a.cfg.FileTokens.IssueFile(auth.FileClaims{Sandbox: sb.ID, Path: path, Direction: c.in.Direction, User: user, IssuedAt: iat, ExpiresAt: exp})
	if err != nil {
		return nil, fmt.Errorf("issue file token: %w", err)
	}
	return idempotentReply(ctx, a, c, http.StatusCreated, apiv1.Transfer{
		URL:       a.baseURL(c.r) + apiv1.FilesDataPath(sb.ID.String(), c.in.Direction),
		Method:    method,
		Token:     tok,
		ExpiresAt: exp,
		Path:      path.String(),
		Direction: c.in.Direction,
	})
}
