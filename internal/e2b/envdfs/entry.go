package envdfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/model"
)

// maxListEntries bounds one ListDir answer (all levels together).
const maxListEntries = 100_000

// fileMode is the Go file mode of a native entry: its permission bits,
// setuid/setgid/sticky and its type.
func fileMode(fi apiv1.FileInfo) fs.FileMode {
	m := fs.FileMode(fi.Mode & 0o777)
	if fi.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if fi.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if fi.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch fi.Type {
	case apiv1.FileTypeDirectory:
		m |= fs.ModeDir
	case apiv1.FileTypeSymlink:
		m |= fs.ModeSymlink
	case apiv1.FileTypeFile:
	default:
		m |= fs.ModeIrregular
	}
	return m
}

// fileType maps a native type to E2B's; devices, FIFOs and sockets are
// unspecified (the SDK skips them in lists).
func fileType(t string) filesystempb.FileType {
	switch t {
	case apiv1.FileTypeFile:
		return filesystempb.FileType_FILE_TYPE_FILE
	case apiv1.FileTypeDirectory:
		return filesystempb.FileType_FILE_TYPE_DIRECTORY
	case apiv1.FileTypeSymlink:
		return filesystempb.FileType_FILE_TYPE_SYMLINK
	}
	return filesystempb.FileType_FILE_TYPE_UNSPECIFIED
}

// entry is entryOf with the caller's sandbox's accounts.
func (c caller) entry(fi apiv1.FileInfo) *filesystempb.EntryInfo { return entryOf(fi, c.acc) }

// entryOf converts a native FileInfo to E2B's EntryInfo. Mode is the
// permission bits (envd's FileMode.Perm()), Permissions the whole mode as
// ls shows it; owner and group are the names acc gives the file's IDs (the
// number when the sandbox has no name for one); metadata the file's.
func entryOf(fi apiv1.FileInfo, acc guestuser.Accounts) *filesystempb.EntryInfo {
	m := fileMode(fi)
	e := &filesystempb.EntryInfo{
		Name:        path.Base(fi.Path),
		Type:        fileType(fi.Type),
		Path:        fi.Path,
		Size:        fi.Size,
		Mode:        uint32(m.Perm()),
		Permissions: m.String(),
		Owner:       acc.UserName(int64(fi.UID)),
		Group:       acc.GroupName(int64(fi.GID)),
		Metadata:    fi.Metadata,
	}
	if fi.Name != "" {
		e.Name = fi.Name
	}
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = timestamppb.New(fi.ModTime)
	}
	if fi.Type == apiv1.FileTypeSymlink && fi.LinkTarget != "" {
		t := fi.LinkTarget
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(fi.Path), t)
		}
		e.SymlinkTarget = &t
	}
	return e
}

// ListDir lists a directory down to depth levels (0 means 1), in
// lexical pre-order like envd's filepath.WalkDir; symlinks to
// directories are listed, not entered.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	p, err := c.path(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	w := walker{ctx: ctx, c: c}
	if err := w.walk(p, depth); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: w.entries}), nil
}

type walker struct {
	ctx     context.Context
	c       caller
	entries []*filesystempb.EntryInfo
}

var errTooMany = errors.New("too many entries")

func (w *walker) walk(dir model.GuestPath, depth int) error {
	l, err := w.c.t.Native.ListFiles(w.ctx, w.c.t.Sandbox, dir, w.c.as())
	if err != nil {
		return nativeError(w.ctx, "list "+dir.String(), err)
	}
	if l.Truncated {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("directory %s has more entries than Airlock lists at once (10000)", dir))
	}
	sort.Slice(l.Entries, func(i, j int) bool { return l.Entries[i].Name < l.Entries[j].Name })
	for _, fi := range l.Entries {
		if len(w.entries) >= maxListEntries {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("list %s: %w (more than %d); ask for a smaller depth", dir, errTooMany, maxListEntries))
		}
		w.entries = append(w.entries, w.c.entry(fi))
		if depth > 1 && fi.Type == apiv1.FileTypeDirectory {
			sub, err := model.ParseGuestPath(fi.Path)
			if err != nil {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("list %s: entry path: %w", dir, err))
			}
			if err := w.walk(sub, depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}
