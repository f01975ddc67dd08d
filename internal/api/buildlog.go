package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/eventstream"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Limits of the build log stream.
const (
	maxLogEvent    = 64 << 10 // bytes of log text in one event
	logPoll        = 250 * time.Millisecond
	logKeepalive   = 15 * time.Second
	maxLogLineWait = 2 * time.Second // a partial line is sent after this long
)

// buildLog: GET /v1/builds/{id}/log[?follow=false][&offset=N] →
// text/event-stream of log events (whole lines, each with the log's byte
// offset after it as its id and in its data), progress events while the
// build runs, and a last done event carrying the build. It follows the
// build until it ends, unless follow=false, which sends the log so far and
// done. The log starts at byte Last-Event-ID, or else ?offset=N, or else 0.
func (a *API) buildLog(w http.ResponseWriter, r *http.Request, p principal) {
	follow, from, highest, err := parseLogQuery(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	b, err := a.buildOf(ctx, r, p) // the caller's to see, else not_found
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	tail := &logTail{path: a.logPath(b.ID), max: maxLogEvent, off: from}
	size, err := tail.size()
	if err != nil {
		a.writeError(w, r, fmt.Errorf("build log %s: %w", b.ID, err))
		return
	}
	if highest > size {
		a.writeError(w, r, badRequest("offset %d is beyond the end of the log (%d bytes)", highest, size))
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := a.cfg.Store.Watch(wctx)

	sse := eventstream.Start(w)
	var (
		lastProg  apiv1.BuildProgressEventData
		lastSent  = time.Now()
		lastReady = time.Now()
	)
	emit := func(d apiv1.BuildLogEventData) error {
		lastSent = time.Now()
		return sse.Event(strconv.FormatInt(d.Offset, 10), apiv1.EventBuildLog, d)
	}
	tick := time.NewTicker(logPoll)
	defer tick.Stop()
	for {
		done := b.State.Done() || !follow
		if err := tail.send(done, b.State.Done(), emit); err != nil {
			a.log.DebugContext(ctx, "build log stream ends", "build", b.ID, "err", err)
			return
		}
		if done {
			_ = sse.Event("", apiv1.EventBuildDone, buildOut(b))
			_ = sse.Flush()
			return
		}
		prog := apiv1.BuildProgressEventData{State: string(b.State), StepsDone: b.StepsDone, StepsCached: b.StepsCached, StepsTotal: b.StepsTotal}
		if a.cfg.Builds != nil {
			if p, ok := a.cfg.Builds.Progress(b.ID); ok {
				prog.Entries, prog.Bytes = p.Entries, p.Bytes
				if p.StepsTotal > 0 {
					prog.StepsDone, prog.StepsCached, prog.StepsTotal = p.StepsDone, p.StepsCached, p.StepsTotal
				}
			}
		}
		if prog != lastProg {
			if err := sse.Event("", apiv1.EventBuildProgress, prog); err != nil {
				return
			}
			lastProg, lastSent = prog, time.Now()
		}
		if time.Since(lastSent) > logKeepalive {
			if err := sse.Comment("keepalive"); err != nil {
				return
			}
			lastSent = time.Now()
		}
		if err := sse.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		if a.cfg.Ready != nil && time.Since(lastReady) > time.Second {
			// A server that is shutting down ends the stream at once (the
			// client opens it again) rather than holding its drain.
			if err := a.cfg.Ready(ctx); err != nil {
				a.log.DebugContext(ctx, "build log stream ends: not ready", "build", b.ID, "err", err)
				return
			}
			lastReady = time.Now()
		}
		nb, err := a.cfg.Store.GetBuild(ctx, b.ID)
		if err != nil {
			a.log.DebugContext(ctx, "build log stream ends", "build", b.ID, "err", err)
			return
		}
		b = nb
	}
}

// parseLogQuery parses follow (default true) and the resume point of a log
// stream: the Last-Event-ID header (what an EventSource sends when it
// reconnects, so it wins over the query) or ?offset=N, a byte offset in the
// log such as a log event carried. highest is the highest offset given,
// which must not be beyond the log's end either.
func parseLogQuery(r *http.Request) (follow bool, from, highest int64, err error) {
	follow = true
	for name, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return false, 0, 0, badRequest("give %s once", textclip.Bytes(name, maxEcho))
		}
		switch name {
		case "follow":
			if follow, err = strconv.ParseBool(vals[0]); err != nil {
				return false, 0, 0, badRequest("follow must be true or false")
			}
		case "offset":
			if from, err = parseLogOffset("offset", vals[0]); err != nil {
				return false, 0, 0, err
			}
		default:
			return false, 0, 0, badRequest("unknown query parameter %q (give follow or offset)", textclip.Bytes(name, maxEcho))
		}
	}
	highest = from
	if ids := r.Header.Values("Last-Event-ID"); len(ids) > 1 {
		return false, 0, 0, badRequest("give Last-Event-ID once")
	} else if len(ids) == 1 && ids[0] != "" {
		if from, err = parseLogOffset("Last-Event-ID", ids[0]); err != nil {
			return false, 0, 0, err
		}
		highest = max(highest, from)
	}
	return follow, from, highest, nil
}

func parseLogOffset(what, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, badRequest("%s must be a byte offset in the log, a non-negative integer", what)
	}
	return n, nil
}

func (a *API) logPath(id model.BuildID) string {
	if a.cfg.Builds == nil {
		return ""
	}
	return build.LogPath(a.cfg.Builds.LogDir(), id)
}

// logTail turns a growing log file into log events: whole lines of up to
// max bytes, never cut inside a UTF-8 character, each with the file offset
// after it.
type logTail struct {
	path    string
	max     int       // bytes in one event, at least utf8.UTFMax
	off     int64     // the file is read up to here
	pending []byte    // read, not sent: the file's bytes [off-len(pending), off)
	since   time.Time // when the partial line in pending began to wait
}

// size returns the log file's size; a log that does not exist (yet) is
// empty.
func (t *logTail) size() (int64, error) {
	if t.path == "" {
		return 0, nil
	}
	fi, err := os.Stat(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// send reads what the log has gained and passes it to emit as events.
// A partial last line waits up to maxLogLineWait for its end, unless flush
// (the stream ends now). complete says the log will not grow: a character
// truncated at its end is sent (as U+FFFD) rather than waited for.
func (t *logTail) send(flush, complete bool, emit func(apiv1.BuildLogEventData) error) error {
	for {
		chunk, err := readLogFrom(t.path, t.off, t.max)
		if err != nil {
			return err
		}
		t.off += int64(len(chunk))
		t.pending = append(t.pending, chunk...)
		eof := len(chunk) < t.max // pending ends where the file does, for now
		for len(t.pending) > 0 {
			waited := !t.since.IsZero() && time.Since(t.since) >= maxLogLineWait
			n := logCut(t.pending, t.max, eof && (flush || waited), eof && complete)
			if n == 0 {
				if t.since.IsZero() {
					t.since = time.Now()
				}
				break
			}
			d := apiv1.BuildLogEventData{Text: logText(t.pending[:n]), Offset: t.off - int64(len(t.pending)) + int64(n)}
			if err := emit(d); err != nil {
				return err
			}
			t.pending, t.since = t.pending[n:], time.Time{}
		}
		if eof {
			return nil
		}
	}
}

// logCut returns how many bytes at the head of p the next log event
// carries, or 0 for none yet: its whole lines up to max bytes; else, when a
// line is longer than max, or when partial says to send a partial line,
// what runeCut allows.
func logCut(p []byte, max int, partial, complete bool) int {
	n := min(len(p), max)
	if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
		return i + 1 // '\n' is never inside a character
	}
	if len(p) < max && !partial {
		return 0
	}
	return runeCut(p, n, complete)
}

// runeCut returns the largest m <= n such that p[:m] ends on a character
// boundary: no character (decoded as Go does, an invalid byte being one
// U+FFFD) that starts before m ends after it, whatever bytes follow p —
// unless complete says none will.
func runeCut(p []byte, n int, complete bool) int {
	for i := max(0, n-(utf8.UTFMax-1)); i < n; i++ {
		if !utf8.RuneStart(p[i]) {
			continue // a continuation byte ends a character or is invalid alone
		}
		if !utf8.FullRune(p[i:]) {
			if complete {
				continue // a truncated character: invalid bytes, one by one
			}
			return i
		}
		if _, size := utf8.DecodeRune(p[i:]); i+size > n {
			return i
		}
	}
	return n
}

// logText is the text of log bytes: each byte of an invalid sequence
// becomes U+FFFD (so that text cut on character boundaries joins up to the
// text of the whole).
func logText(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	var sb strings.Builder
	sb.Grow(len(p) + 16)
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(p[:size])
		}
		p = p[size:]
	}
	return sb.String()
}

// readLogFrom reads up to max bytes of the log at path from off; a log
// that does not exist (yet) is empty.
func readLogFrom(path string, off int64, max int) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read build log: %w", err)
	}
	return buf[:n], nil
}
