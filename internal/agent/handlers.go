package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// maxRequestBody bounds request bodies.
const maxRequestBody = 1 << 20

// outputBatch is how many events an output stream takes from the log at once.
const outputBatch = 256

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.handleInfo)
	mux.HandleFunc("POST /v1/processes", s.handleStart)
	mux.HandleFunc("GET /v1/processes", s.handleList)
	mux.HandleFunc("GET /v1/processes/{id}", s.handleStatus)
	mux.HandleFunc("GET /v1/processes/{id}/output", s.handleOutput)
	mux.HandleFunc("POST /v1/processes/{id}/signal", s.handleSignal)
	s.fileRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, agentproto.CodeNoRoute, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, agentproto.Error{Code: code, Message: msg})
}

// decodeBody decodes a JSON request body strictly: unknown fields are an
// error, so an old agent never silently ignores something a newer host
// asked for.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, agentproto.CodeInvalidRequest, fmt.Sprintf("request body over %d bytes", maxRequestBody))
			return false
		}
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, "bad JSON body: "+err.Error())
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, "bad JSON body: trailing data after the object")
		return false
	}
	return true
}

// processFor parses the {id} path value and finds the process, writing the
// error response if there is none.
func (s *Server) processFor(w http.ResponseWriter, r *http.Request) *process {
	id, err := model.ParseProcessID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, err.Error())
		return nil
	}
	p := s.lookup(id)
	if p == nil {
		writeError(w, http.StatusNotFound, agentproto.CodeNotFound, fmt.Sprintf("no process %s", id))
		return nil
	}
	return p
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.info())
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	var req agentproto.StartRequest
	if !decodeBody(w, r, &req) {
		return
	}
	st, err := s.start(req)
	if err != nil {
		var se *startError
		if errors.As(err, &se) {
			writeError(w, se.status, se.code, se.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, st)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, agentproto.ProcessList{Processes: s.list()})
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	if p := s.processFor(w, r); p != nil {
		writeJSON(w, http.StatusOK, p.snapshot())
	}
}

func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	var req agentproto.SignalRequest
	if !decodeBody(w, r, &req) {
		return
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, err.Error())
		return
	}
	if err := s.waiter.signal(p.child, sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			writeError(w, http.StatusConflict, agentproto.CodeNotRunning, fmt.Sprintf("process %s has exited", p.id))
			return
		}
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, fmt.Sprintf("signal %s: %v", req.Signal, err))
		return
	}
	s.logger.Info("signalled process", "id", p.id, "pid", p.child.pid, "signal", signalName(sig))
	w.WriteHeader(http.StatusNoContent)
}

// handleOutput streams the process's events after ?after=N as NDJSON,
// flushing every line, until the exit event has been written.
func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, fmt.Sprintf("after=%q: want a non-negative integer", truncateMsg(v)))
			return
		}
		after = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, "response writer cannot flush")
		return
	}
	s.streams.Add(1)
	defer s.streams.Add(-1)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	enc := json.NewEncoder(w)
	for {
		evs, done, changed := p.log.read(after, outputBatch)
		for i := range evs {
			if err := enc.Encode(&evs[i]); err != nil {
				return // the client went away
			}
			flusher.Flush()
			after = evs[i].Seq
		}
		if done {
			return
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			// Reset the stream rather than end it cleanly, so the client
			// knows the output did not end and can resume elsewhere.
			panic(http.ErrAbortHandler)
		}
	}
}
