package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/volumefs"
)

// The volume content API: a volume's files without a sandbox, served by
// the node that holds the volume through its host mount (VolumeHost.
// Content mounts it if no sandbox of the node has, and a node's
// reconciler unmounts it once idle). A volume without a node yet is bound
// to the node answering. Every path is resolved beneath the volume's root
// (internal/volumefs): no "..", symlink or race leads out of it.
func (a *API) volumeFileRoutes() []route {
	return []route{
		{"GET", "/v1/volumes/{id}/files/stat", member | volumeToken, a.volumeHosted(a.statVolumeFile)},
		{"GET", "/v1/volumes/{id}/files/list", member | volumeToken, a.volumeHosted(a.listVolumeFiles)},
		{"GET", "/v1/volumes/{id}/files/content", member | volumeToken, a.volumeHosted(a.readVolumeFile)},
		{"PUT", "/v1/volumes/{id}/files/content", member | volumeToken, a.volumeHosted(a.writeVolumeFile)},
		{"POST", "/v1/volumes/{id}/files/mkdir", member | volumeToken, a.volumeHosted(mutating(a, a.mkdirVolumeFile))},
		{"POST", "/v1/volumes/{id}/files/remove", member | volumeToken, a.volumeHosted(mutating(a, a.removeVolumeFile))},
		{"POST", "/v1/volumes/{id}/files/move", member | volumeToken, a.volumeHosted(mutating(a, a.moveVolumeFile))},
		{"POST", "/v1/volumes/{id}/files/metadata", member | volumeToken, a.volumeHosted(mutating(a, a.setVolumeFileMetadata))},
	}
}

// volumeContentPattern is the streamed write's route (its body is timed
// by progress, not whole).
const volumeContentPattern = "PUT /v1/volumes/{id}/files/content"

type volumeKey struct{}

// heldVolume is the volume a content call runs on, open on this node.
type heldVolume struct {
	v    model.Volume
	root *volumefs.Root
}

func heldFrom(ctx context.Context) *heldVolume {
	h, _ := ctx.Value(volumeKey{}).(*heldVolume)
	return h
}

// volumeHosted runs h on the node that holds the volume {id} (its ID or
// name) of the caller's project, with the volume open: a volume on
// another node is forwarded there, one on no node yet is bound to this
// one. Another project's volume is volume_not_found.
func (a *API) volumeHosted(h func(http.ResponseWriter, *http.Request, principal)) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		ctx := r.Context()
		v, err := a.requestedVolume(r, p)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if v.NodeID == "" && a.cfg.Volumes != nil && a.cfg.Self != "" {
			if v, err = a.cfg.Store.BindVolumeNode(ctx, p.project, v.ID, a.cfg.Self); err != nil {
				a.writeError(w, r, fmt.Errorf("bind volume %s: %w", v.ID, err))
				return
			}
		}
		switch {
		case v.NodeID == "":
			a.writeError(w, r, errorf(apiv1.CodeNotSupported,
				"volume %s is on no node yet, and this server keeps no volumes (an api replica): write it through a node, or mount it in a sandbox first", v.ID))
			return
		case a.router != nil && a.router.Remote(v.NodeID) && peerFrom(ctx) == nil:
			a.forwardTo(w, r, p, v.NodeID)
			return
		case a.cfg.Volumes == nil || v.NodeID != a.cfg.Self:
			a.writeError(w, r, errorf(apiv1.CodeUnavailable, "volume %s is on node %s, not here", v.ID, v.NodeID))
			return
		}
		root, release, err := a.cfg.Volumes.Content(ctx, v.ID, v.SizeMiB)
		if err != nil {
			a.writeError(w, r, fmt.Errorf("open volume %s: %w", v.ID, err))
			return
		}
		defer release()
		h(w, r.WithContext(context.WithValue(ctx, volumeKey{}, &heldVolume{v: v, root: root})), p)
	}
}

// volumePath parses the path named name of a content call.
func volumePath(name, s string) (model.VolumeFilePath, error) {
	p, err := model.ParseVolumeFilePath(s)
	if err != nil {
		return "", errorf(apiv1.CodeInvalidPath, "%s: %v", name, err)
	}
	return p, nil
}

// volumeQueryPath is the ?path= of a content call.
func volumeQueryPath(r *http.Request) (model.VolumeFilePath, error) {
	q := r.URL.Query()["path"]
	if len(q) != 1 {
		return "", errorf(apiv1.CodeInvalidPath, "give the path query parameter once")
	}
	return volumePath("path", q[0])
}

// volumeFileError maps what volumefs answers to the API's codes.
func volumeFileError(err error) error {
	var pe *fs.PathError
	what := "the path"
	if errors.As(err, &pe) {
		what = pe.Path
	}
	switch {
	case errors.Is(err, model.ErrInvalid):
		return badRequest("%v", err)
	case errors.Is(err, volumefs.ErrRoot):
		return errorf(apiv1.CodeInvalidPath, "%v", err)
	case errors.Is(err, volumefs.ErrTooLarge):
		return errorf(apiv1.CodePayloadTooLarge, "%v", err)
	case errors.Is(err, volumefs.ErrUnsupportedType):
		return errorf(apiv1.CodeUnsupportedFileType, "%s is not a regular file", what)
	case errors.Is(err, fs.ErrNotExist):
		return notFound("%s does not exist in the volume", what)
	case errors.Is(err, unix.EEXIST):
		return errorf(apiv1.CodeAlreadyExists, "%s exists already", what)
	case errors.Is(err, unix.ENOTDIR):
		return errorf(apiv1.CodeNotADirectory, "%s: a component is not a directory", what)
	case errors.Is(err, unix.EISDIR):
		return errorf(apiv1.CodeIsADirectory, "%s is a directory", what)
	case errors.Is(err, unix.ENOTEMPTY):
		return errorf(apiv1.CodeDirectoryNotEmpty, "%s is a directory that is not empty (remove it with recursive)", what)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errorf(apiv1.CodeVolumeFull, "the volume is full (its size is its limit): %s was not written", what)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errorf(apiv1.CodeInvalidPath, "%s: too many symlinks, a symlink where none may be, or a path across mounts", what)
	case errors.Is(err, unix.EINVAL):
		return badRequest("%s: not possible (a directory moved into itself?)", what)
	}
	return err
}

func volumeFileOut(e volumefs.Entry) apiv1.VolumeFile {
	return apiv1.VolumeFile{
		Path: e.Path.String(), Name: e.Name, Type: string(e.Type), Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		ATime: e.ATime, MTime: e.MTime, CTime: e.CTime, LinkTarget: e.Target,
	}
}

// statVolumeFile: GET /v1/volumes/{id}/files/stat?path= → 200 VolumeFile.
func (a *API) statVolumeFile(w http.ResponseWriter, r *http.Request, _ principal) {
	p, err := volumeQueryPath(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	e, err := heldFrom(r.Context()).root.Stat(p)
	if err != nil {
		a.writeError(w, r, volumeFileError(err))
		return
	}
	writeJSON(w, http.StatusOK, volumeFileOut(e))
}

// listVolumeFiles: GET /v1/volumes/{id}/files/list?path=[&depth=] → 200
// VolumeFileList (depth 1–16, default 1).
func (a *API) listVolumeFiles(w http.ResponseWriter, r *http.Request, _ principal) {
	p, err := volumeQueryPath(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		if depth, err = strconv.Atoi(s); err != nil || depth < 1 || depth > 16 {
			a.writeError(w, r, badRequest("depth must be 1 to 16"))
			return
		}
	}
	entries, truncated, err := heldFrom(r.Context()).root.List(p, depth)
	if err != nil {
		a.writeError(w, r, volumeFileError(err))
		return
	}
	out := apiv1.VolumeFileList{Path: p.String(), Entries: make([]apiv1.VolumeFile, 0, len(entries)), Truncated: truncated}
	for _, e := range entries {
		out.Entries = append(out.Entries, volumeFileOut(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// readVolumeFile: GET /v1/volumes/{id}/files/content?path= → 200 the
// file's bytes (application/octet-stream), streamed.
func (a *API) readVolumeFile(w http.ResponseWriter, r *http.Request, _ principal) {
	p, err := volumeQueryPath(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	f, e, err := heldFrom(r.Context()).root.OpenFile(p)
	if err != nil {
		a.writeError(w, r, volumeFileError(err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
	w.Header().Set("Last-Modified", e.MTime.Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyN(w, f, e.Size); err != nil && r.Context().Err() == nil {
		// The status is sent: the short body tells the client.
		a.log.WarnContext(r.Context(), "volume file read cut short", "path", p, "err", err)
	}
}

// writeVolumeFile: PUT /v1/volumes/{id}/files/content?path=[&mode=&uid=
// &gid=&overwrite=false] with the bytes as the body → 201 VolumeFile.
// Streamed to a staged file and renamed into place (atomic); missing
// parents are made; bounded by the volume's size (413 payload_too_large
// for a body that says it is larger, 507 volume_full when the filesystem
// fills).
func (a *API) writeVolumeFile(w http.ResponseWriter, r *http.Request, _ principal) {
	held := heldFrom(r.Context())
	p, err := volumeQueryPath(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	opts := volumefs.WriteOptions{MaxBytes: int64(held.v.SizeMiB) << 20}
	if opts.Owner, err = ownerQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	if s := r.URL.Query().Get("overwrite"); s != "" {
		ow, err := strconv.ParseBool(s)
		if err != nil {
			a.writeError(w, r, badRequest("overwrite must be true or false"))
			return
		}
		opts.NoReplace = !ow
	}
	if r.ContentLength > opts.MaxBytes {
		a.writeError(w, r, errorf(apiv1.CodePayloadTooLarge, "%d bytes do not fit in a volume of %d MiB", r.ContentLength, held.v.SizeMiB))
		return
	}
	e, err := held.root.WriteFile(p, r.Body, opts)
	if err != nil {
		if errors.Is(err, errBodyTimeout) || r.Context().Err() != nil {
			a.writeError(w, r, err)
			return
		}
		a.writeError(w, r, volumeFileError(err))
		return
	}
	writeJSON(w, http.StatusCreated, volumeFileOut(e))
}

// ownerQuery parses a write's ?mode= (octal) &uid= &gid=.
func ownerQuery(r *http.Request) (volumefs.Owner, error) {
	var o volumefs.Owner
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		base int
		dst  **uint32
	}{{"mode", 8, &o.Mode}, {"uid", 10, &o.UID}, {"gid", 10, &o.GID}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, f.base, 32)
		if err != nil {
			return o, badRequest("%s %q: want a number (mode in octal)", f.name, s)
		}
		v := uint32(n)
		*f.dst = &v
	}
	return o, nil
}

// mkdirVolumeFile: POST /v1/volumes/{id}/files/mkdir → 200 VolumeFile
// (mkdir -p).
func (a *API) mkdirVolumeFile(ctx context.Context, c *call[apiv1.VolumeMkdirRequest]) (*reply, error) {
	p, err := volumePath("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	e, err := heldFrom(ctx).root.Mkdir(p, volumefs.Owner{Mode: c.in.Mode, UID: c.in.UID, GID: c.in.GID}, true)
	if err != nil {
		return nil, volumeFileError(err)
	}
	return idempotentReply(ctx, a, c, http.StatusOK, volumeFileOut(e))
}

// removeVolumeFile: POST /v1/volumes/{id}/files/remove → 200
// RemoveResponse.
func (a *API) removeVolumeFile(ctx context.Context, c *call[apiv1.VolumeRemoveRequest]) (*reply, error) {
	p, err := volumePath("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	if err := heldFrom(ctx).root.Remove(p, c.in.Recursive); err != nil {
		return nil, volumeFileError(err)
	}
	return idempotentReply(ctx, a, c, http.StatusOK, apiv1.RemoveResponse{Path: p.String()})
}

// moveVolumeFile: POST /v1/volumes/{id}/files/move → 200 VolumeFile (at
// its new path).
func (a *API) moveVolumeFile(ctx context.Context, c *call[apiv1.VolumeMoveRequest]) (*reply, error) {
	from, err := volumePath("from", c.in.From)
	if err != nil {
		return nil, err
	}
	to, err := volumePath("to", c.in.To)
	if err != nil {
		return nil, err
	}
	e, err := heldFrom(ctx).root.Rename(from, to, c.in.Overwrite)
	if err != nil {
		return nil, volumeFileError(err)
	}
	return idempotentReply(ctx, a, c, http.StatusOK, volumeFileOut(e))
}

// setVolumeFileMetadata: POST /v1/volumes/{id}/files/metadata → 200
// VolumeFile.
func (a *API) setVolumeFileMetadata(ctx context.Context, c *call[apiv1.VolumeMetadataRequest]) (*reply, error) {
	p, err := volumePath("path", c.in.Path)
	if err != nil {
		return nil, err
	}
	e, err := heldFrom(ctx).root.SetMetadata(p, volumefs.Owner{Mode: c.in.Mode, UID: c.in.UID, GID: c.in.GID})
	if err != nil {
		return nil, volumeFileError(err)
	}
	return idempotentReply(ctx, a, c, http.StatusOK, volumeFileOut(e))
}
