package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// registerFiles adds the file transfer routes (only with Config.FileTokens).
func (d *DataPlane) registerFiles(mux *http.ServeMux) {
	if d.cfg.FileTokens == nil {
		return
	}
	for _, dir := range []string{apiv1.DirectionDownload, apiv1.DirectionUpload, apiv1.DirectionTarOut, apiv1.DirectionTarIn, apiv1.DirectionWatch} {
		mux.HandleFunc(apiv1.TransferMethod(dir)+" "+apiv1.FilesDataPath("{id}", dir), d.fileTransfer(dir))
	}
}

// checkFileToken authorizes a transfer request: a file token of this
// sandbox and direction, not expired. It writes the refusal and returns false.
func (d *DataPlane) checkFileToken(w http.ResponseWriter, r *http.Request, direction string) (auth.FileClaims, bool) {
	tok := bearer(r)
	switch {
	case tok == "":
		writeError(w, apiv1.CodeUnauthenticated, "missing file transfer token: send Authorization: Bearer <token>")
		return auth.FileClaims{}, false
	case auth.KindOf(tok) != auth.KindFiles:
		writeError(w, apiv1.CodeWrongTokenKind, "this route takes a file transfer token (alf_…) from POST /v1/sandboxes/{id}/files/transfers")
		return auth.FileClaims{}, false
	}
	c, err := d.cfg.FileTokens.VerifyFile(tok, d.cfg.Now())
	switch {
	case errors.Is(err, auth.ErrTokenExpired):
		writeError(w, apiv1.CodeTokenExpired, "file transfer token expired; create a new transfer")
		return auth.FileClaims{}, false
	case err != nil:
		writeError(w, apiv1.CodeUnauthenticated, "invalid file transfer token")
		return auth.FileClaims{}, false
	case c.Sandbox.String() != r.PathValue("id") || c.Direction != direction:
		writeError(w, apiv1.CodeUnauthenticated, "this file transfer token is for another sandbox or direction")
		return auth.FileClaims{}, false
	}
	return c, true
}

// fileTransfer serves one direction of /data/v1/sandboxes/{id}/files/….
func (d *DataPlane) fileTransfer(direction string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		c, ok := d.checkFileToken(w, r, direction)
		if !ok {
			return
		}
		sb, err := d.cfg.Store.GetSandboxByID(ctx, c.Sandbox)
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, apiv1.CodeNotFound, fmt.Sprintf("sandbox %s not found", c.Sandbox))
			return
		}
		if err != nil {
			d.log.ErrorContext(ctx, "load sandbox", "sandbox", c.Sandbox, "err", err)
			writeError(w, apiv1.CodeInternal, "could not load the sandbox")
			return
		}
		if d.routeRemote(w, r, sb.ID, sb.NodeID) {
			return
		}
		if !connectionAuthenticated(w, r, sb.ProjectID) {
			return
		}
		if sb.State != model.StateRunning {
			pe := guestops.NotRunning(sb.ID, sb.State)
			writeStatusError(w, pe.Status, pe.Code, pe.Message)
			return
		}
		agent, err := d.cfg.Agents.Agent(sb.ID)
		if err != nil {
			writeProcError(w, err)
			return
		}
		defer d.hold(sb.ID)() // a transfer (or a watch) is activity while it lasts
		defer d.cfg.Metrics.StreamOpened(fileStreams[direction])()
		p := c.Path.String()
		as := agentguest.AgentUser(c.User) // from the signed claims: the request cannot change it
		switch direction {
		case apiv1.DirectionDownload:
			d.download(ctx, w, agent, p, as)
		case apiv1.DirectionTarOut:
			d.tarOut(ctx, w, agent, p, as)
		case apiv1.DirectionUpload:
			d.upload(ctx, w, r, agent, p, as)
		case apiv1.DirectionTarIn:
			d.tarIn(ctx, w, r, agent, p, as)
		case apiv1.DirectionWatch:
			d.watch(ctx, w, agent, p, as)
		}
	}
}

func writeFileError(w http.ResponseWriter, err error) {
	fe := agentguest.FileError(err)
	writeStatusError(w, fe.Status, fe.Code, fe.Message)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// copyOut streams body to the client with a bounded buffer. A stream that
// breaks midway is reset, never ended cleanly, so the client cannot take a
// truncated file or tar for a complete one.
func (d *DataPlane) copyOut(ctx context.Context, w http.ResponseWriter, body io.Reader, what, kind string) {
	n, err := io.CopyBuffer(flushWriter{w}, body, make([]byte, 256<<10))
	d.cfg.Metrics.StreamBytes(kind, metrics.DirectionOut, n)
	if err != nil && ctx.Err() == nil {
		d.log.WarnContext(ctx, "file stream broke", "what", what, "bytes", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// flushWriter hides ReadFrom so the copy buffer bounds memory.
type flushWriter struct{ w io.Writer }

func (f flushWriter) Write(b []byte) (int, error) { return f.w.Write(b) }

func (d *DataPlane) download(ctx context.Context, w http.ResponseWriter, agent *agentclient.Client, p string, as agentclient.FileOption) {
	body, size, err := agent.ReadFile(ctx, p, as)
	if err != nil {
		writeFileError(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	inertContent(w.Header(), p)
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	d.copyOut(ctx, w, body, "download "+p, metrics.StreamFileDownload)
}

func (d *DataPlane) tarOut(ctx context.Context, w http.ResponseWriter, agent *agentclient.Client, p string, as agentclient.FileOption) {
	body, err := agent.TarOut(ctx, p, as)
	if err != nil {
		writeFileError(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Cache-Control", "no-store")
	inertContent(w.Header(), path.Base(p)+".tar")
	w.WriteHeader(http.StatusOK)
	d.copyOut(ctx, w, body, "tar-out "+p, metrics.StreamFileTarOut)
}

// mediaOK accepts a missing Content-Type or one of want.
func mediaOK(w http.ResponseWriter, r *http.Request, want ...string) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		for _, m := range want {
			if mt == m {
				return true
			}
		}
	}
	writeError(w, apiv1.CodeUnsupportedMedia, fmt.Sprintf("Content-Type must be %v", want))
	return false
}

func (d *DataPlane) upload(ctx context.Context, w http.ResponseWriter, r *http.Request, agent *agentclient.Client, p string, as agentclient.FileOption) {
	if !mediaOK(w, r, "application/octet-stream") {
		return
	}
	mode := -1
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			writeError(w, apiv1.CodeInvalidRequest, "mode must be octal, at most 7777")
			return
		}
		mode = int(m)
	}
	body := d.countIn(metrics.StreamFileUpload, r.Body)
	defer body.done()
	fi, err := agent.WriteFile(ctx, p, mode, body, as)
	if err != nil {
		writeFileError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, agentguest.FileInfoOut(fi))
}

func (d *DataPlane) tarIn(ctx context.Context, w http.ResponseWriter, r *http.Request, agent *agentclient.Client, p string, as agentclient.FileOption) {
	if !mediaOK(w, r, "application/x-tar", "application/octet-stream") {
		return
	}
	body := d.countIn(metrics.StreamFileTarIn, r.Body)
	defer body.done()
	res, err := agent.TarIn(ctx, p, body, as)
	if err != nil {
		writeFileError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.TarResult{Entries: res.Entries, Bytes: res.Bytes})
}

func (d *DataPlane) watch(ctx context.Context, w http.ResponseWriter, agent *agentclient.Client, p string, as agentclient.FileOption) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, apiv1.CodeInternal, "streaming unsupported")
		return
	}
	ws, err := agent.Watch(ctx, p, as)
	if err != nil {
		writeFileError(w, err)
		return
	}
	defer ws.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	// The guest's word, passed on only as one of the names it may be.
	netFS := ""
	switch ws.Ready.NetworkFS {
	case "nfs", "cifs", "smb", "fuse":
		netFS = ws.Ready.NetworkFS
	}
	if err := enc.Encode(apiv1.FileEvent{Type: agentproto.FileEventReady, Path: p, NetworkFS: netFS}); err != nil {
		return
	}
	flusher.Flush()
	for {
		ev, err := ws.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				d.log.InfoContext(ctx, "watch stream ended", "path", p, "err", err)
				panic(http.ErrAbortHandler)
			}
			return
		}
		if err := enc.Encode(apiv1.FileEvent{Type: ev.Type, Path: ev.Path, From: ev.From, IsDir: ev.IsDir}); err != nil {
			return
		}
		flusher.Flush()
	}
}

// inertContent marks a guest file's bytes as a download that never runs
// as the server's origin (the web console's): a sandboxed document if a
// browser renders it after all (apiv1.GuestContentHeaders), no content
// sniffing, and saved under the file's base name.
func inertContent(h http.Header, name string) {
	apiv1.GuestContentHeaders(h)
	if d := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(name)}); d != "" {
		h.Set("Content-Disposition", d)
	}
}
