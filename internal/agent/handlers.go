package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// maxRequestBody bounds request bodies.
const maxRequestBody = 1 << 20

// outputBatch is how many events an output stream takes from the log at once.
const outputBatch = 256

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.handleInfo)
	mux.HandleFunc("GET /v1/logs", s.handleLogs)
	mux.HandleFunc("GET /v1/usage", s.handleUsage)
	mux.HandleFunc("POST /v1/processes", s.handleStart)
	mux.HandleFunc("GET /v1/processes", s.handleList)
	mux.HandleFunc("GET /v1/processes/{id}", s.handleStatus)
	mux.HandleFunc("GET /v1/processes/{id}/output", s.handleOutput)
	mux.HandleFunc("POST /v1/processes/{id}/signal", s.handleSignal)
	mux.HandleFunc("GET /v1/processes/{id}/wait", s.handleWait)
	mux.HandleFunc("POST /v1/processes/{id}/stdin", s.handleStdin)
	mux.HandleFunc("POST /v1/processes/{id}/resize", s.handleResize)
	mux.HandleFunc("PUT /v1/guest", s.handleGuestConfig)
	mux.HandleFunc("POST /v1/listener/release", s.handleReleaseListener)
	s.fileRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, agentproto.CodeNoRoute, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// handleReleaseListener releases the listeners (see unixListener) and
// answers 204: the connection the request came on stays open until the
// host, having read the answer, closes it (or for releaseGrace); the others
// are closed at once.
func (s *Server) handleReleaseListener(w http.ResponseWriter, r *http.Request) {
	conn, _ := r.Context().Value(connKey{}).(net.Conn)
	ok, err := s.releaseListeners(conn)
	switch {
	case !ok:
		writeError(w, http.StatusConflict, agentproto.CodeNotSupported, "this agent serves no listener that can be released (only a Unix socket can)")
	case err != nil:
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, "release the listener: "+err.Error())
	default:
		w.WriteHeader(http.StatusNoContent)
	}
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
	p := s.lookup(r.Context(), id)
	if p == nil {
		writeError(w, http.StatusNotFound, agentproto.CodeNotFound, fmt.Sprintf("no process %s", id))
		return nil
	}
	return p
}

func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	if s.opts.Logs == nil {
		writeError(w, http.StatusNotFound, agentproto.CodeNoRoute, "this agent keeps no log in memory")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(s.opts.Logs.Snapshot())
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

// maxWriteBatch bounds the bytes an output stream encodes before writing.
const maxWriteBatch = 256 << 10

// handleOutput streams the process's events after ?after=N — binary frames
// if the host accepts them, NDJSON otherwise — until the exit event has been
// written. While the stream is open its cursor holds the process's writes
// back; a write that cannot go out within the stall timeout resets the
// stream (the host resumes with after=N).
func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, fmt.Sprintf("after=%q: want a non-negative integer", textclip.Bytes(v, maxEcho)))
			return
		}
		after = n
	}
	if p.log.cursorCount() >= s.opts.StreamsPerProcess {
		writeError(w, http.StatusTooManyRequests, agentproto.CodeBusy, fmt.Sprintf("process %s has %d output streams open already", p.id, s.opts.StreamsPerProcess))
		return
	}
	frames := strings.Contains(r.Header.Get("Accept"), agentproto.FramesMediaType)
	rc := http.NewResponseController(w)
	s.streams.Add(1)
	defer s.streams.Add(-1)
	cur := p.log.attach(after)
	defer p.log.detach(cur)
	if p.releaseHold != nil {
		p.releaseHold() // this stream holds the output back now
	}
	if frames {
		w.Header().Set("Content-Type", agentproto.FramesMediaType)
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var buf []byte
	for {
		evs, done, changed := p.log.read(after, outputBatch)
		buf = buf[:0]
		for i := range evs {
			var err error
			if frames {
				buf, err = agentproto.AppendFrame(buf, &evs[i])
			} else {
				buf, err = appendNDJSON(buf, &evs[i])
			}
			if err != nil {
				s.logger.Error("encode output event", "id", p.id, "seq", evs[i].Seq, "err", err)
				panic(http.ErrAbortHandler)
			}
			last := evs[i].Seq
			if len(buf) >= maxWriteBatch || i == len(evs)-1 {
				if !s.writeOut(w, rc, buf) {
					return // the host went away or stalled: the stream is reset
				}
				buf = buf[:0]
				after = last
				p.log.advance(cur, after)
			}
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

// writeOut writes and flushes b within the stall timeout.
func (s *Server) writeOut(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.StallTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

func appendNDJSON(buf []byte, ev *agentproto.Event) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return buf, err
	}
	return append(append(buf, b...), '\n'), nil
}

// handleWait answers the process's status once it has exited. The
// request's context bounds the wait.
func (s *Server) handleWait(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	select {
	case <-p.done:
		writeJSON(w, http.StatusOK, p.snapshot())
	case <-r.Context().Done():
	case <-s.ctx.Done():
		panic(http.ErrAbortHandler)
	}
}

// handleStdin copies the request body into the process's stdin; with
// ?close=1 it closes stdin after the body.
func (s *Server) handleStdin(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	closeAfter, err := agentproto.ParseCloseParam(r.URL.Query().Get("close"))
	if err != nil {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, err.Error())
		return
	}
	n, err := p.writeStdin(r.Body, closeAfter)
	switch {
	case errors.Is(err, errNoStdin):
		writeError(w, http.StatusConflict, agentproto.CodeNoStdin, fmt.Sprintf("process %s has no open stdin", p.id))
	case errors.Is(err, errStdinGone):
		writeError(w, http.StatusConflict, agentproto.CodeNotRunning, fmt.Sprintf("process %s no longer reads its stdin (wrote %d bytes)", p.id, n))
	case err != nil:
		// The host's request body broke: what arrived was written.
		s.logger.Debug("stdin body ended early", "id", p.id, "written", n, "err", err)
		panic(http.ErrAbortHandler)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) {
	p := s.processFor(w, r)
	if p == nil {
		return
	}
	var req agentproto.ResizeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Rows == 0 || req.Cols == 0 {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidRequest, "rows and cols must be positive")
		return
	}
	if p.pty == nil {
		writeError(w, http.StatusConflict, agentproto.CodeNoPTY, fmt.Sprintf("process %s has no terminal", p.id))
		return
	}
	if exited, _ := p.hasExited(); exited {
		writeError(w, http.StatusConflict, agentproto.CodeNotRunning, fmt.Sprintf("process %s has exited", p.id))
		return
	}
	if err := pty.Setsize(p.pty, &pty.Winsize{Rows: req.Rows, Cols: req.Cols}); err != nil {
		writeError(w, http.StatusConflict, agentproto.CodeNotRunning, fmt.Sprintf("resize: %v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
