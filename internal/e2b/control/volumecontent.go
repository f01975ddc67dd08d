package control

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// E2B's volume content API (/volumecontent/{volumeID}/…, the SDK's
// Volume.list, readFile, writeFile, makeDir, getInfo, updateMetadata,
// remove) on the native one (/v1/volumes/{id}/files/…). The SDK sends the
// volume's token (VolumeAndToken.token, a native volume content token,
// alv_…) as its bearer key, which the native API accepts on that volume's
// file routes only; an API key works too.

func (h *Handler) volumeContentRoutes() []struct {
	pattern string
	fn      func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error
} {
	return []struct {
		pattern string
		fn      func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error
	}{
		{"GET /volumecontent/{id}/path", h.statVolumePath},
		{"PATCH /volumecontent/{id}/path", h.updateVolumePath},
		{"DELETE /volumecontent/{id}/path", h.removeVolumePath},
		{"GET /volumecontent/{id}/dir", h.listVolumeDir},
		{"POST /volumecontent/{id}/dir", h.makeVolumeDir},
		{"GET /volumecontent/{id}/file", h.readVolumeFile},
		{"PUT /volumecontent/{id}/file", h.writeVolumeFile},
	}
}

// volumeEntryOut is E2B's VolumeEntryStat.
type volumeEntryOut struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"` // unknown, file, directory, symlink
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	ATime  time.Time `json:"atime"`
	MTime  time.Time `json:"mtime"`
	CTime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

func volumeEntry(f apiv1.VolumeFile) volumeEntryOut {
	t := f.Type
	if t != "file" && t != "directory" && t != "symlink" {
		t = "unknown"
	}
	return volumeEntryOut{Name: f.Name, Type: t, Path: f.Path, Size: f.Size, Mode: f.Mode, UID: f.UID, GID: f.GID,
		ATime: f.ATime, MTime: f.MTime, CTime: f.CTime, Target: f.LinkTarget}
}

// volumeContentArgs parses a content call's volume ({id}, an ID: a name
// or a malformed ID is a 404) and ?path=.
func volumeContentArgs(r *http.Request) (model.VolumeRef, model.VolumeFilePath, error) {
	id, err := volumeID(r)
	if err != nil {
		return model.VolumeRef{}, "", err
	}
	p, err := model.ParseVolumeFilePath(r.URL.Query().Get("path"))
	if err != nil {
		return model.VolumeRef{}, "", badRequest("path: %v", err)
	}
	return model.VolumeRef{ID: id}, p, nil
}

// uint32Query parses the optional decimal query parameter name.
func uint32Query(r *http.Request, name string) (*uint32, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return nil, badRequest("%s %q: want a number", name, s)
	}
	v := uint32(n)
	return &v, nil
}

// createArgs are the arguments of a call that makes a file or a
// directory: volume, path, owner and mode, force.
type createArgs struct {
	v              model.VolumeRef
	p              model.VolumeFilePath
	mode, uid, gid *uint32
	force          *bool
}

func volumeCreateArgs(r *http.Request) (createArgs, error) {
	var a createArgs
	var err error
	if a.v, a.p, err = volumeContentArgs(r); err != nil {
		return a, err
	}
	if a.mode, a.uid, a.gid, err = ownerQuery(r); err != nil {
		return a, err
	}
	a.force, err = boolQuery(r, "force")
	return a, err
}

// ownerQuery parses ?uid= &gid= &mode= (decimal, as E2B sends them).
func ownerQuery(r *http.Request) (mode, uid, gid *uint32, err error) {
	if mode, err = uint32Query(r, "mode"); err != nil {
		return
	}
	if uid, err = uint32Query(r, "uid"); err != nil {
		return
	}
	gid, err = uint32Query(r, "gid")
	return
}

// boolQuery parses the optional query parameter name (nil if absent).
func boolQuery(r *http.Request, name string) (*bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, badRequest("%s %q: want true or false", name, s)
	}
	return &b, nil
}

// statVolumePath: GET /volumecontent/{id}/path?path= → 200 VolumeEntryStat.
func (h *Handler) statVolumePath(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	v, p, err := volumeContentArgs(r)
	if err != nil {
		return err
	}
	f, err := c.StatVolumeFile(ctx, v, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntry(f))
	return nil
}

// updateVolumePath: PATCH /volumecontent/{id}/path?path= {uid, gid, mode}
// → 200 VolumeEntryStat.
func (h *Handler) updateVolumePath(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	v, p, err := volumeContentArgs(r)
	if err != nil {
		return err
	}
	var in struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	f, err := c.SetVolumeFileMetadata(ctx, v, apiv1.VolumeMetadataRequest{Path: p.String(), Mode: in.Mode, UID: in.UID, GID: in.GID})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntry(f))
	return nil
}

// removeVolumePath: DELETE /volumecontent/{id}/path?path= → 204; a
// directory goes with what it holds.
func (h *Handler) removeVolumePath(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	v, p, err := volumeContentArgs(r)
	if err != nil {
		return err
	}
	if err := c.RemoveVolumeFile(ctx, v, apiv1.VolumeRemoveRequest{Path: p.String(), Recursive: true}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listVolumeDir: GET /volumecontent/{id}/dir?path=&depth= → 200
// [VolumeEntryStat].
func (h *Handler) listVolumeDir(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	v, p, err := volumeContentArgs(r)
	if err != nil {
		return err
	}
	depth := 1
	if d, err := uint32Query(r, "depth"); err != nil {
		return err
	} else if d != nil {
		if *d < 1 || *d > 16 {
			return badRequest("depth must be 1 to 16")
		}
		depth = int(*d)
	}
	l, err := c.ListVolumeFiles(ctx, v, p, depth)
	if err != nil {
		return err
	}
	out := make([]volumeEntryOut, 0, len(l.Entries))
	for _, f := range l.Entries {
		out = append(out, volumeEntry(f))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// makeVolumeDir: POST /volumecontent/{id}/dir?path=&uid=&gid=&mode=&force=
// → 201 VolumeEntryStat. With force, missing parents are made (and an
// existing directory is no error); without, the parent must exist and
// the path must not.
func (h *Handler) makeVolumeDir(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	a, err := volumeCreateArgs(r)
	if err != nil {
		return err
	}
	v, p, mode, uid, gid, force := a.v, a.p, a.mode, a.uid, a.gid, a.force
	if force == nil || !*force {
		if _, err := c.StatVolumeFile(ctx, v, p); err == nil {
			return &httpError{status: http.StatusConflict, msg: "path " + p.String() + " exists already"}
		} else if !client.IsNotFound(err) {
			return err
		}
		dir, _ := p.Split()
		if _, err := c.StatVolumeFile(ctx, v, dir); err != nil {
			return err // 404 for a missing parent
		}
	}
	f, err := c.MkdirVolumeFile(ctx, v, apiv1.VolumeMkdirRequest{Path: p.String(), Mode: mode, UID: uid, GID: gid})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeEntry(f))
	return nil
}

// readVolumeFile: GET /volumecontent/{id}/file?path= → 200 the bytes,
// streamed.
func (h *Handler) readVolumeFile(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	v, p, err := volumeContentArgs(r)
	if err != nil {
		return err
	}
	body, size, err := c.ReadVolumeFile(ctx, v, p)
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil && ctx.Err() == nil {
		h.log.Warn("e2b volume read cut short", "volume", v, "path", p, "err", err)
	}
	return nil
}

// writeVolumeFile: PUT /volumecontent/{id}/file?path=&uid=&gid=&mode=&force=
// with the bytes → 201 VolumeEntryStat. An existing file is replaced
// (the SDK's writeFile overwrites) unless force=false.
func (h *Handler) writeVolumeFile(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	a, err := volumeCreateArgs(r)
	if err != nil {
		return err
	}
	v, p, mode, uid, gid, force := a.v, a.p, a.mode, a.uid, a.gid, a.force
	q := url.Values{}
	if mode != nil {
		q.Set("mode", strconv.FormatUint(uint64(*mode), 8))
	}
	if uid != nil {
		q.Set("uid", strconv.FormatUint(uint64(*uid), 10))
	}
	if gid != nil {
		q.Set("gid", strconv.FormatUint(uint64(*gid), 10))
	}
	if force != nil && !*force {
		q.Set("overwrite", "false")
	}
	f, err := c.WriteVolumeFile(ctx, v, p, r.Body, q)
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: err.Error()}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeEntry(f))
	return nil
}
