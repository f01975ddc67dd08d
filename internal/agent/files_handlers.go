package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// DefaultFilesRoot is the directory file endpoints treat as "/".
const DefaultFilesRoot = "/"

// fileRoutes adds the /v1/files endpoints (see agentproto/files.go).
func (s *Server) fileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/files/stat", s.asFileUser(s.handleFileStat))
	mux.HandleFunc("GET /v1/files/list", s.asFileUser(s.handleFileList))
	mux.HandleFunc("POST /v1/files/mkdir", s.asFileUser(s.handleFileMkdir))
	mux.HandleFunc("POST /v1/files/metadata", s.asFileUser(s.handleFileMetadata))
	mux.HandleFunc("POST /v1/files/move", s.asFileUser(s.handleFileMove))
	mux.HandleFunc("POST /v1/files/remove", s.asFileUser(s.handleFileRemove))
	mux.HandleFunc("GET /v1/files/content", s.asFileUser(s.handleFileRead))
	mux.HandleFunc("PUT /v1/files/content", s.asFileUser(s.handleFileWrite))
	mux.HandleFunc("GET /v1/files/tar", s.asFileUser(s.handleTarOut))
	mux.HandleFunc("PUT /v1/files/tar", s.asFileUser(s.handleTarIn))
	// A watch opens its directory as the user, then streams as the agent.
	mux.HandleFunc("GET /v1/files/watch", s.handleWatch)
}

func (s *Server) files() fsRoot {
	return fsRoot{dir: cmp.Or(s.opts.FilesRoot, DefaultFilesRoot)}
}

// writeFileError answers err: a fileError with its code, anything else 500.
func (s *Server) writeFileError(w http.ResponseWriter, r *http.Request, err error) {
	var fe *fileError
	if errors.As(err, &fe) {
		writeError(w, fe.status, fe.code, fe.msg)
		return
	}
	s.logger.Warn("file request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, err.Error())
}

// queryPath parses the path query parameter.
func (s *Server) queryPath(w http.ResponseWriter, r *http.Request) (model.GuestPath, bool) {
	vals := r.URL.Query()["path"]
	if len(vals) != 1 {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidPath, "give the path query parameter once")
		return "", false
	}
	p, err := parsePath(vals[0])
	if err != nil {
		s.writeFileError(w, r, err)
		return "", false
	}
	return p, true
}

func (s *Server) handleFileStat(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	fi, err := s.files().stat(p)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) handleFileList(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	l, err := s.files().list(p)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) handleFileMkdir(w http.ResponseWriter, r *http.Request) {
	var req agentproto.MkdirRequest
	if !decodeBody(w, r, &req) {
		return
	}
	p, err := parsePath(req.Path)
	if err == nil && req.Owner != nil {
		if _, asUser := r.URL.Query()[agentproto.QueryFileUser]; asUser {
			writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, "a mkdir with an owner runs as the agent: name no user")
			return
		}
		var fi agentproto.FileInfo
		if fi, err = s.files().mkdirAllOwned(s.logger, p, req.Mode, *req.Owner); err == nil {
			writeJSON(w, http.StatusOK, fi)
			return
		}
	} else if err == nil {
		var fi agentproto.FileInfo
		if fi, err = s.files().mkdirAll(p, req.Mode); err == nil {
			writeJSON(w, http.StatusOK, fi)
			return
		}
	}
	s.writeFileError(w, r, err)
}

func (s *Server) handleFileMetadata(w http.ResponseWriter, r *http.Request) {
	var req agentproto.SetMetadataRequest
	if !decodeBody(w, r, &req) {
		return
	}
	p, err := parsePath(req.Path)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	m, err := model.ParseFileMetadata(req.Metadata)
	if err != nil {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, err.Error())
		return
	}
	fi, err := s.files().setMetadata(p, m)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) handleFileMove(w http.ResponseWriter, r *http.Request) {
	var req agentproto.MoveRequest
	if !decodeBody(w, r, &req) {
		return
	}
	from, err := parsePath(req.From)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	to, err := parsePath(req.To)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	if err := s.files().move(from, to, req.Overwrite); err != nil {
		s.writeFileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleFileRemove(w http.ResponseWriter, r *http.Request) {
	var req agentproto.RemoveRequest
	if !decodeBody(w, r, &req) {
		return
	}
	p, err := parsePath(req.Path)
	if err == nil {
		err = s.files().remove(p, req.Recursive)
	}
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleFileRead(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	f, size, err := s.files().openRegular(p)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyBuffer(onlyWriter{w}, io.LimitReader(f, size), make([]byte, copyBuffer)); err != nil {
		s.logger.Debug("file download ended early", "path", p, "err", err)
	}
}

func (s *Server) handleFileWrite(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	mode := -1
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, "mode must be octal, at most 7777")
			return
		}
		mode = int(m)
	}
	fi, err := s.files().writeFile(p, mode, r.Body)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) handleTarOut(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	// Open before answering, so a missing or wrong path is a clean error.
	if fi, err := s.files().stat(p); err != nil {
		s.writeFileError(w, r, err)
		return
	} else if fi.Type != agentproto.FileTypeDirectory {
		writeError(w, http.StatusConflict, agentproto.CodeNotADirectory, p.String()+" is not a directory")
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := s.files().tarOut(p, w); err != nil {
		s.logger.Info("tar stream failed", "path", p, "err", err)
		// Reset the stream: a truncated tar must not look complete.
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) handleTarIn(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	res, err := s.files().tarIn(p, r.Body)
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	p, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, "response writer cannot flush")
		return
	}
	u, ok := queryFileUser(w, r)
	if !ok {
		return
	}
	var wt *watcher
	var err error
	if u == nil {
		wt, err = s.files().watch(p)
	} else if runErr := runAs(s.logger, *u, func() { wt, err = s.files().watch(p) }); runErr != nil {
		s.logger.Warn("cannot act as file user", "user", u.String(), "err", runErr)
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, runErr.Error())
		return
	}
	if err != nil {
		s.writeFileError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	emit := func(ev agentproto.FileEvent) error {
		if err := enc.Encode(ev); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	if err := emit(agentproto.FileEvent{Type: agentproto.FileEventReady, Path: p.String(), NetworkFS: wt.networkFS}); err != nil {
		wt.f.Close()
		return
	}
	if err := wt.run(r.Context(), emit); err != nil {
		s.logger.Debug("watch ended", "path", p, "err", err)
	}
}
