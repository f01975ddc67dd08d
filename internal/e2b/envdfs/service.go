// Package envdfs answers E2B envd's filesystem API — the
// filesystem.Filesystem Connect service and the /files upload and download
// endpoints — by translating every call to Airlock's native file API
// (internal/client), acting on the sandbox the E2B gateway put in the
// request's context (internal/e2b/target).
//
// Paths: E2B paths may be relative (to the chosen user's home) or start
// with "~"; they are cleaned like envd's filepath.Abs does ("../../etc"
// from /home/user is /etc) and parsed once into model.GuestPath. They are
// guest paths: the native API confines them to the sandbox's root.
//
// Known differences from E2B's envd, all because the native API does not
// offer the capability (nothing is faked):
//   - EntryInfo.owner and .group are the names the sandbox's /etc/passwd
//     and /etc/group give the file's IDs (read through the native API,
//     cached 30 s), the number when there is none.
//   - Every file call runs as the E2B user's UID and primary GID (the
//     native API's file user), so permissions are the user's and what it
//     creates is its own; supplementary groups are not applied. Missing
//     directories (MakeDir, a write's or a move's parents) are created
//     by the agent and given to the user (native mkdir with an owner), as
//     envd (root) makes them; the agent has no CAP_DAC_OVERRIDE, so not
//     where root of the sandbox could not create them either.
//   - Metadata (EntryInfo.metadata, X-Metadata-* on uploads) is the
//     file's user.e2b.* extended attributes, as envd keeps it, set through
//     the native API after the upload (model.FileMetadata bounds it).
//   - A native watch covers one directory's entries, so a recursive
//     WatchDir or CreateWatcher holds one native watch per directory (at
//     most 64; more is resource_exhausted), added as directories appear.
//   - CHMOD events are never reported (the native watch does not see them).
//   - A watch of a directory on a network file system (NFS, CIFS, SMB,
//     FUSE, as the sandbox's agent reads its statfs type) is refused with
//     failed_precondition unless allow_network_mounts, as envd ≥ 0.6.4
//     does; only the watched directory is checked, not those below it.
//   - A symlink's symlink_target is its link text made absolute against its
//     directory, not the fully resolved path.
package envdfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/connecterr"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb/filesystempbconnect"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Service implements filesystempbconnect.FilesystemHandler.
type Service struct {
	log      *slog.Logger
	watchers *Watchers
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// maxRequestBytes bounds one request message (paths and options only);
// a larger one is refused with resource_exhausted.
const maxRequestBytes = 1 << 20

// NewHandler returns the path to mount and the handler of the
// filesystem.Filesystem Connect service. Polling watchers
// (CreateWatcher…) live in watchers, which the caller closes at shutdown.
func NewHandler(logger *slog.Logger, watchers *Watchers) (path string, h http.Handler) {
	return filesystempbconnect.NewFilesystemHandler(&Service{log: logger, watchers: watchers}, connect.WithReadMaxBytes(maxRequestBytes))
}

// caller is the resolved sandbox and user of one request.
type caller struct {
	t    target.Target
	user guestuser.User
	acc  guestuser.Accounts
	meta model.FileMetadata // of the files an upload writes
}

// mkdirParents creates the missing parents of p, owned by the caller's
// user, as E2B's envd (root) makes them: also where only root may create
// one.
func (c caller) mkdirParents(ctx context.Context, p model.GuestPath) error {
	parent := path.Dir(p.String())
	if parent == "/" {
		return nil
	}
	if _, err := c.t.Native.MkdirOwned(ctx, c.t.Sandbox, model.GuestPath(parent), c.owner()); err != nil {
		return nativeError(ctx, "create parent of "+p.String(), err)
	}
	return nil
}

// owner is the caller's user as the owner of what is created for it.
func (c caller) owner() apiv1.User { return apiv1.User{UID: c.user.UID, GID: c.user.GID} }

// resolveCaller reads the request's target and resolves its user; name
// overrides the target's user when not empty (?username= of /files).
func resolveCaller(ctx context.Context, name string) (caller, error) {
	t, ok := target.From(ctx)
	if !ok || t.Native == nil {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, errors.New("the request is not authenticated for a sandbox"))
	}
	if name != "" {
		t.User = name
	}
	acc, err := t.Accounts(ctx)
	if err != nil {
		return caller{}, nativeError(ctx, "resolve user", err)
	}
	u, err := acc.Pick(t.User)
	if errors.Is(err, guestuser.ErrUnknown) {
		return caller{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if err != nil {
		return caller{}, nativeError(ctx, "resolve user", err)
	}
	return caller{t: t, user: u, acc: acc}, nil
}

// callerTarget is the sandbox of a request that needs no user.
func callerTarget(ctx context.Context) (model.SandboxID, error) {
	t, ok := target.From(ctx)
	if !ok || t.Native == nil {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("the request is not authenticated for a sandbox"))
	}
	return t.Sandbox, nil
}

// resolvePath turns an E2B path into an absolute guest path: "~" and "~/…"
// are the user's home, relative paths are relative to it, and the result
// is cleaned ("..": at most up to "/").
func resolvePath(home model.GuestPath, raw string) (model.GuestPath, error) {
	if raw == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path must not be empty"))
	}
	p := raw
	switch {
	case p == "~":
		p = home.String()
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home.String(), p[2:])
	case !strings.HasPrefix(p, "/"):
		p = path.Join(home.String(), p)
	default:
		p = path.Clean(p)
	}
	gp, err := model.ParseGuestPath(p)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q: %w", textclip.Bytes(raw, maxEcho), err))
	}
	return gp, nil
}

// as is the native call option that runs a file call as the caller's user,
// so the sandbox kernel checks its permissions and what it creates is its
// own (as envd does).
func (c caller) as() client.FileOption {
	return client.AsUser(&apiv1.User{UID: c.user.UID, GID: c.user.GID})
}

// path resolves raw against the caller's home.
func (c caller) path(raw string) (model.GuestPath, error) { return resolvePath(c.user.Home, raw) }

// nativeError turns an error of the native API into a Connect error
// (connecterr's table), its message prefixed with what was being done.
func nativeError(ctx context.Context, what string, err error) error {
	return connecterr.From(ctx, what, err)
}

// Stat describes one entry (a final symlink is not followed).
func (s *Service) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	p, err := c.path(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := c.t.Native.StatFile(ctx, c.t.Sandbox, p, c.as())
	if err != nil {
		return nil, nativeError(ctx, "stat "+p.String(), err)
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: c.entry(fi)}), nil
}

// MakeDir creates a directory and its missing parents; an existing
// directory is already_exists, an existing non-directory invalid_argument.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	p, err := c.path(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := c.t.Native.StatFile(ctx, c.t.Sandbox, p, c.as())
	switch {
	case err == nil && fi.Type == apiv1.FileTypeDirectory:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	case !client.IsNotFound(err):
		return nil, nativeError(ctx, "stat "+p.String(), err)
	}
	fi, err = c.t.Native.MkdirOwned(ctx, c.t.Sandbox, p, c.owner())
	if err != nil {
		return nil, nativeError(ctx, "mkdir "+p.String(), err)
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: c.entry(fi)}), nil
}

// Move renames source to destination (replacing a file there, as
// rename(2) does), creating the destination's missing parents.
func (s *Service) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	from, err := c.path(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	to, err := c.path(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	if _, err := c.t.Native.StatFile(ctx, c.t.Sandbox, from, c.as()); err != nil {
		return nil, nativeError(ctx, "source "+from.String(), err)
	}
	if err := c.mkdirParents(ctx, to); err != nil {
		return nil, err
	}
	fi, err := c.t.Native.MoveFile(ctx, c.t.Sandbox, apiv1.MoveRequest{From: from.String(), To: to.String(), Overwrite: true}, c.as())
	if err != nil {
		return nil, nativeError(ctx, "move "+from.String()+" to "+to.String(), err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: c.entry(fi)}), nil
}

// Remove removes a file, symlink or directory (recursively); a missing
// path is not an error (envd's os.RemoveAll).
func (s *Service) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	p, err := c.path(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := c.t.Native.RemoveFile(ctx, c.t.Sandbox, p, true, c.as()); err != nil && !client.IsNotFound(err) {
		return nil, nativeError(ctx, "remove "+p.String(), err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// maxEcho is how many bytes of a caller's value an error message quotes (textclip.Bytes).
const maxEcho = 200
