package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
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
		{"POST", "/v1/sandboxes/{id}/files/metadata", member | sandboxToken, a.hosted(mutating(a, a.setFileMetadata))},
		{"POST", "/v1/sandboxes/{id}/files/transfers", member | sandboxToken, a.hosted(mutating(a, a.createTransfer))},
	}
}

// FileTokenIssuer issues file transfer tokens ("alf_…"): the management
// API's side, which holds the signing key; the data plane verifies them
// with public keys only. *auth.Issuer (from the server's keyring, so it
// follows rotation) implements it.
type FileTokenIssuer interface {
	IssueFile(c auth.FileClaims) (string, error)
}

// fileGuest returns the guest of the caller's running sandbox {id}.
func (a *API) fileGuest(ctx context.Context, r *http.Request, p principal) (model.Sandbox, guestops.Guest, error) {
	if a.cfg.Guests == nil || a.cfg.FileTokens == nil {
		return model.Sandbox{}, nil, errorf(apiv1.CodeNotSupported, "this server has no file access to sandboxes")
	}
	return a.guestOf(ctx, r, p)
}

// parsePathField parses a guest path from a body field or query parameter.
func parsePathField(name, s string) (model.GuestPath, error) {
	p, err := model.ParseGuestPath(s)
	if err != nil {
		return "", errorf(apiv1.CodeInvalidPath, "%s: %v", name, err)
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
		return "", nil, errorf(apiv1.CodeInvalidPath, "give the path query parameter once")
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

// fileCall runs one call on the guest of the caller's running sandbox
// {id}; its error is the guest's *guestops.Error (classify answers it).
func fileCall[T any](ctx context.Context, a *API, r *http.Request, p principal, do func(context.Context, guestops.Guest) (T, error)) (T, error) {
	var zero T
	_, guest, err := a.fileGuest(ctx, r, p)
	if err != nil {
		return zero, err
	}
	v, err := do(ctx, guest)
	if err != nil {
		return zero, err
	}
	return v, nil
}

// fileGet answers a read-only file route: ?path= parsed, one guest call,
// its result as JSON.
func fileGet[T any](a *API, w http.ResponseWriter, r *http.Request, p principal, do func(context.Context, guestops.Guest, model.GuestPath, *model.UserIDs) (T, error)) {
	path, user, err := queryPath(r)
	if err == nil {
		var out T
		out, err = fileCall(r.Context(), a, r, p, func(ctx context.Context, guest guestops.Guest) (T, error) {
			return do(ctx, guest, path, user)
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
	fileGet(a, w, r, p, func(ctx context.Context, guest guestops.Guest, path model.GuestPath, as *model.UserIDs) (apiv1.FileInfo, error) {
		return guest.Stat(ctx, path, as)
	})
}

// listFiles: GET /v1/sandboxes/{id}/files/list?path= → 200 FileList.
func (a *API) listFiles(w http.ResponseWriter, r *http.Request, p principal) {
	fileGet(a, w, r, p, func(ctx context.Context, guest guestops.Guest, path model.GuestPath, as *model.UserIDs) (apiv1.FileList, error) {
		return guest.ListDir(ctx, path, as)
	})
}

// fileMutation runs a mutating file call on the guest and answers 200 with
// its result, storing the idempotency record (the guest did the work; a
// repeat with the same key replays this answer).
func fileMutation[T, R any](ctx context.Context, a *API, c *call[T], do func(context.Context, guestops.Guest) (R, error)) (*reply, error) {
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
	owner, err := fileUser(c.in.Owner)
	if err != nil {
		return nil, err
	}
	if owner != nil && user != nil {
		return nil, badRequest("give user or owner, not both: a mkdir with an owner runs as the agent")
	}
	return fileMutation(ctx, a, c, func(ctx context.Context, guest guestops.Guest) (apiv1.FileInfo, error) {
		return guest.Mkdir(ctx, path, user, owner)
	})
}

// setFileMetadata: POST /v1/sandboxes/{id}/files/metadata → 200 FileInfo.
func (a *API) setFileMetadata(ctx context.Context, c *call[apiv1.SetFileMetadataRequest]) (*reply, error) {
	path, err := parsePathField("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	user, err := fileUser(c.in.User)
	if err != nil {
		return nil, err
	}
	m, err := model.ParseFileMetadata(c.in.Metadata)
	if err != nil {
		return nil, badRequest("metadata: %v", err)
	}
	return fileMutation(ctx, a, c, func(ctx context.Context, guest guestops.Guest) (apiv1.FileInfo, error) {
		return guest.SetMetadata(ctx, path, m, user)
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
	return fileMutation(ctx, a, c, func(ctx context.Context, guest guestops.Guest) (apiv1.FileInfo, error) {
		return guest.Move(ctx, from, to, c.in.Overwrite, user)
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
	return fileMutation(ctx, a, c, func(ctx context.Context, guest guestops.Guest) (apiv1.RemoveResponse, error) {
		err := guest.Remove(ctx, path, c.in.Recursive, user)
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
	if c.in.Resume && a.cfg.Guests != nil && a.cfg.FileTokens != nil {
		sb, err := a.sandboxOf(ctx, c.r, c.p)
		if err != nil {
			return nil, err
		}
		if _, err := a.cfg.Sandboxes.RunFirst(ctx, c.p.project, sb); err != nil {
			return nil, err
		}
	}
	sb, _, err := a.fileGuest(ctx, c.r, c.p)
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
