package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template/build"
)

// decodeLog is the text of log bytes as Go decodes them: each invalid
// byte is one U+FFFD (the reference logText must match, cut or not).
func decodeLog(p []byte) string {
	var sb strings.Builder
	for _, r := range string(p) {
		sb.WriteRune(r)
	}
	return sb.String()
}

// testLog has 1- to 4-byte characters, lines longer than a small event,
// and (unless valid) invalid bytes and a truncated character at its end.
func testLog(valid bool) []byte {
	b := []byte("step 1/3 größe ✓ 𝄞 naïve\nI: 日本語のログ𝄞𝄞𝄞ü\n\nx€y\n")
	if !valid {
		b = append(b, "bad \xff\xfe here \xe2\x82 and \xf0\x9d\n\xc3"...)
	}
	return b
}

// tailAll sends the log at path from off with flush and complete and
// returns its events.
func tailAll(t *testing.T, tail *logTail, flush, complete bool) []apiv1.BuildLogEventData {
	t.Helper()
	var evs []apiv1.BuildLogEventData
	if err := tail.send(flush, complete, func(d apiv1.BuildLogEventData) error {
		evs = append(evs, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkEvents checks that events from offset from cover log[from:] in
// order, each the exact text of its bytes, and returns the text.
func checkEvents(t *testing.T, log []byte, from int64, evs []apiv1.BuildLogEventData) string {
	t.Helper()
	var sb strings.Builder
	prev := from
	for _, d := range evs {
		if d.Offset <= prev || d.Offset > int64(len(log)) {
			t.Fatalf("from %d: event offset %d after %d (log of %d bytes)", from, d.Offset, prev, len(log))
		}
		if want := decodeLog(log[prev:d.Offset]); d.Text != want || !utf8.ValidString(d.Text) {
			t.Fatalf("from %d: event [%d,%d) is %q, want %q", from, prev, d.Offset, d.Text, want)
		}
		sb.WriteString(d.Text)
		prev = d.Offset
	}
	return sb.String()
}

// TestLogTailCutEverywhere: a log written up to every byte position, then
// to its end, is streamed (partial lines sent at once, or only whole ones)
// in events that never split a character and join up to the whole log's
// text; resumed at every offset, the stream is the rest of the log exactly.
func TestLogTailCutEverywhere(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "build.log")
	for _, valid := range []bool{true, false} {
		log := testLog(valid)
		want := decodeLog(log)
		if valid && want != string(log) {
			t.Fatal("a valid log decodes to other text")
		}
		for _, max := range []int{utf8.UTFMax, 7, maxLogEvent} {
			for _, flush := range []bool{true, false} {
				for cut := 0; cut <= len(log); cut++ {
					if err := os.WriteFile(path, log[:cut], 0o600); err != nil {
						t.Fatal(err)
					}
					tail := &logTail{path: path, max: max}
					evs := tailAll(t, tail, flush, false)
					if err := os.WriteFile(path, log, 0o600); err != nil {
						t.Fatal(err)
					}
					evs = append(evs, tailAll(t, tail, flush, false)...)
					evs = append(evs, tailAll(t, tail, true, true)...)
					got := checkEvents(t, log, 0, evs)
					if sha256.Sum256([]byte(got)) != sha256.Sum256([]byte(want)) || evs[len(evs)-1].Offset != int64(len(log)) {
						t.Fatalf("valid %v, max %d, flush %v, cut at %d: text %q, want %q", valid, max, flush, cut, got, want)
					}
					// Resumed at every event's offset: the rest exactly.
					for i, d := range evs {
						rest := tailAll(t, &logTail{path: path, max: max, off: d.Offset}, true, true)
						if got := checkEvents(t, log, d.Offset, rest); got != decodeLog(log[d.Offset:]) || checkEvents(t, log, 0, evs[:i+1])+got != want {
							t.Fatalf("resumed at %d: %q", d.Offset, got)
						}
					}
				}
			}
			// Resumed at any byte offset, even inside a character: the
			// text of the bytes from there.
			for off := 0; off <= len(log); off++ {
				evs := tailAll(t, &logTail{path: path, max: max, off: int64(off)}, true, true)
				if got := checkEvents(t, log, int64(off), evs); got != decodeLog(log[off:]) {
					t.Fatalf("from %d: %q", off, got)
				}
			}
		}
	}
}

func TestRuneCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p        string
		n        int
		complete bool
		want     int
	}{
		{"ab", 2, false, 2},
		{"a\xe2\x82\xac", 2, false, 1},     // inside €
		{"a\xe2\x82\xac", 4, false, 4},     // after €
		{"a\xe2\x82", 3, false, 1},         // € still being written
		{"a\xe2\x82", 3, true, 3},          // … or never finished: two invalid bytes
		{"a\xe2\x82b", 3, false, 3},        // invalid: b is not a continuation byte
		{"a\xf0\x9d\x84\x9e", 4, false, 1}, // inside 𝄞
		{"\xf0\x9d\x84", 3, false, 0},
		{"\xff\xfe", 1, false, 1},
	} {
		if got := runeCut([]byte(c.p), c.n, c.complete); got != c.want {
			t.Errorf("runeCut(%q, %d, %v) = %d, want %d", c.p, c.n, c.complete, got, c.want)
		}
	}
}

// logBuilds is a build runner that runs nothing and keeps its logs in dir.
type logBuilds struct{ dir string }

func (l logBuilds) LogDir() string { return l.dir }
func (logBuilds) Progress(model.BuildID) (build.Progress, bool) {
	return build.Progress{}, false
}
func (logBuilds) SetRegistryAuth(model.BuildID, string, string) {}

// logEvents parses a log stream's events: the log events' data (checking
// that each id is its offset) and whether it ended with done.
func logEvents(t *testing.T, body []byte) (evs []apiv1.BuildLogEventData, done bool) {
	t.Helper()
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		lines := strings.Split(ev, "\n")
		switch {
		case len(lines) == 3 && lines[1] == "event: log":
			var d apiv1.BuildLogEventData
			if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &d); err != nil {
				t.Fatal(err)
			}
			if lines[0] != "id: "+strconv.FormatInt(d.Offset, 10) {
				t.Fatalf("log event %q: its id is not its offset", ev)
			}
			evs = append(evs, d)
		case len(lines) == 2 && lines[0] == "event: done":
			done = true
		default:
			t.Fatalf("unexpected event %q", ev)
		}
	}
	return evs, done
}

// TestBuildLogResume: GET /v1/builds/{id}/log resumes at every offset
// (?offset= or Last-Event-ID) with the rest of the log exactly, sends a
// line longer than an event in pieces that split no character, and
// refuses offsets that are not offsets of the log.
func TestBuildLogResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, func(c *envConfig) { c.Builds = logBuilds{dir: dir} })
	ctx := context.Background()
	// A build project A queued (A's member reads its log).
	b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: e.tplDir, Project: e.projA, CreatedAt: time.Now()}
	if err := e.st.CreateBuild(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	logPath := build.LogPath(dir, b.ID)
	log := testLog(false)
	if err := os.WriteFile(logPath, log, 0o600); err != nil {
		t.Fatal(err)
	}
	path := "/v1/builds/" + b.ID.String() + "/log"
	get := func(from int, header bool) ([]apiv1.BuildLogEventData, bool) {
		r := req{method: "GET", path: path + "?follow=false", key: e.keyA, t: t}
		switch {
		case header:
			r.header = http.Header{"Last-Event-ID": {strconv.Itoa(from)}, "Accept": {"text/event-stream"}}
			if from%3 == 0 {
				r.path += "&offset=0" // Last-Event-ID wins
			}
		case from > 0 || from%2 == 0:
			r.path += "&offset=" + strconv.Itoa(from)
		}
		resp := e.send(r).want(t, http.StatusOK)
		if resp.header.Get("X-Accel-Buffering") != "no" || resp.header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("headers %v", resp.header)
		}
		return logEvents(t, resp.body)
	}
	// The build is pending: follow=false sends what there is, but for a
	// character not yet finished at the end.
	for off := 0; off <= len(log); off++ {
		evs, done := get(off, off%2 == 1)
		got := checkEvents(t, log, int64(off), evs)
		end := len(log) - 1 // the log ends with the first byte of a character
		if off > end {
			end = off
		}
		if !done || got != decodeLog(log[off:end]) {
			t.Fatalf("from %d: done %v, text %q, want %q", off, done, got, decodeLog(log[off:end]))
		}
	}
	// Finished, the build's log is complete: its last byte is sent too.
	if _, err := e.st.ClaimBuild(ctx, store.Claim{Owner: "t", Lease: time.Minute, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.FinishBuild(ctx, store.BuildFinish{ID: b.ID, Owner: "t", State: model.BuildFailed, Error: &model.BuildError{Code: "build_failed", Message: "x"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for off := 0; off <= len(log); off++ {
		evs, done := get(off, off%2 == 0)
		if got := checkEvents(t, log, int64(off), evs); !done || got != decodeLog(log[off:]) {
			t.Fatalf("from %d: done %v, text %q", off, done, got)
		}
	}
	// A line of 300 KiB of multi-byte characters: cut at 64 KiB, never
	// inside a character; resumed at each cut, the rest exactly.
	long := []byte(strings.Repeat("ü€𝄞", 300<<10/9) + "\n")
	if err := os.WriteFile(logPath, long, 0o600); err != nil {
		t.Fatal(err)
	}
	evs, _ := get(0, false)
	if got := checkEvents(t, long, 0, evs); sha256.Sum256([]byte(got)) != sha256.Sum256(long) || len(evs) < 5 {
		t.Fatalf("%d events of the long line", len(evs))
	}
	for _, d := range evs {
		rest, _ := get(int(d.Offset), true)
		if got := checkEvents(t, long, d.Offset, rest); got != string(long[d.Offset:]) {
			t.Fatalf("resumed at %d", d.Offset)
		}
	}
	// Bad offsets.
	size := strconv.Itoa(len(long))
	beyond := strconv.Itoa(len(long) + 1)
	for _, c := range []struct {
		query, header string
		invalid       bool // the OpenAPI document refuses it too
	}{
		{query: "-1", invalid: true},
		{query: "x", invalid: true},
		{query: "1.5", invalid: true},
		{query: "99999999999999999999", invalid: true},
		{query: beyond},
		{header: "-1", invalid: true},
		{header: "5x", invalid: true},
		{header: "five", invalid: true},
		{header: beyond},
		{query: "0", header: beyond},
		{query: beyond, header: "0"},
	} {
		r := req{method: "GET", path: path + "?follow=false", key: e.keyA, invalid: c.invalid, t: t}
		if c.query != "" {
			r.path += "&offset=" + c.query
		}
		if c.header != "" {
			r.header = http.Header{"Last-Event-ID": {c.header}}
		}
		e.send(r).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	e.send(req{method: "GET", path: path + "?follow=false&offset=" + size, key: e.keyA, t: t}).want(t, http.StatusOK)
	e.send(req{method: "GET", path: path + "?follow=false&offset=1&offset=2", key: e.keyA, t: t}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.send(req{method: "GET", path: path + "?tail=1", key: e.keyA, t: t}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}
