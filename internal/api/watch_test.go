package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// sseReader reads the events (and comments) of an event stream.
type sseReader struct {
	t      *testing.T
	lines  chan string
	cancel context.CancelFunc
	res    *http.Response
}

type sseEvent struct{ name, data, comment string }

func openSSE(t *testing.T, base, path, key string, header http.Header) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		r.Header[k] = v
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sseReader{t: t, lines: make(chan string, 64), cancel: cancel, res: res}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { cancel(); res.Body.Close() })
	return s
}

// next returns the next event or comment, failing after d.
func (s *sseReader) next(d time.Duration) sseEvent {
	s.t.Helper()
	var ev sseEvent
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("the stream ended; got so far %+v", ev)
			}
			switch {
			case l == "":
				if ev != (sseEvent{}) {
					return ev
				}
			case strings.HasPrefix(l, ": "):
				ev.comment = strings.TrimPrefix(l, ": ")
			case strings.HasPrefix(l, "event: "):
				ev.name = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: "):
				ev.data = strings.TrimPrefix(l, "data: ")
			}
		case <-timeout:
			s.t.Fatalf("no event within %s", d)
		}
	}
}

// list waits for the next sandboxes event and decodes it.
func (s *sseReader) list(d time.Duration) apiv1.SandboxList {
	s.t.Helper()
	for {
		ev := s.next(d)
		if ev.comment != "" {
			continue
		}
		if ev.name != apiv1.EventSandboxes {
			s.t.Fatalf("event %q, want %q", ev.name, apiv1.EventSandboxes)
		}
		var l apiv1.SandboxList
		if err := json.Unmarshal([]byte(ev.data), &l); err != nil {
			s.t.Fatalf("event data %q: %v", ev.data, err)
		}
		return l
	}
}

func ids(l apiv1.SandboxList) map[string]string {
	out := map[string]string{}
	for _, sb := range l.Sandboxes {
		out[sb.ID] = sb.State
	}
	return out
}

func TestWatchSandboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sbA := e.runningSandbox(e.keyA)
	sbB := e.runningSandbox(e.keyB)

	all := openSSE(t, e.srv.URL, "/v1/watch/sandboxes", e.keyA, nil)
	if ct := all.res.Header.Get("Content-Type"); all.res.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("answer %d %q", all.res.StatusCode, ct)
	}
	running := openSSE(t, e.srv.URL, "/v1/watch/sandboxes?state=running", e.keyA, nil)
	labelled := openSSE(t, e.srv.URL, "/v1/watch/sandboxes?metadata=team%3Dred", e.keyA, nil)

	// The first event comes at once: the list as GET /v1/sandboxes has it,
	// of the caller's project only.
	first := all.list(2 * time.Second)
	var want apiv1.SandboxList
	e.do("GET", "/v1/sandboxes", e.keyA, "").want(t, http.StatusOK).decode(t, &want)
	if got := ids(first); len(got) != 1 || got[sbA.String()] != string(model.StateRunning) {
		t.Fatalf("first event %v, want only A's running sandbox", got)
	}
	if _, leak := ids(first)[sbB.String()]; leak {
		t.Fatal("the watch shows another project's sandbox")
	}
	if wb, _ := json.Marshal(want); !strings.Contains(string(wb), sbA.String()) || len(want.Sandboxes) != len(first.Sandboxes) {
		t.Fatalf("the event differs from GET /v1/sandboxes: %s", wb)
	}
	if got := ids(running.list(2 * time.Second)); len(got) != 1 {
		t.Fatalf("state=running first event %v", got)
	}
	if got := ids(labelled.list(2 * time.Second)); len(got) != 0 {
		t.Fatalf("metadata filter first event %v, want none", got)
	}

	// A new sandbox (its create still pending) is a new event; the
	// state filter leaves it out, the metadata filter takes it.
	created := e.createSandbox(e.keyA, `{"metadata": {"team": "red"}}`).Sandbox.ID
	if got := ids(all.list(2 * time.Second)); len(got) != 2 || got[created] == "" {
		t.Fatalf("after a create: %v", got)
	}
	if got := ids(labelled.list(2 * time.Second)); len(got) != 1 || got[created] == "" {
		t.Fatalf("metadata filter after a create: %v", got)
	}
	// A state change of A's running sandbox is an event; the pending one
	// was never sent on the running filter.
	e.lifecycle(t, sbA, "pause", e.keyA).want(t, http.StatusAccepted)
	for {
		got := ids(all.list(2 * time.Second))
		if got[sbA.String()] != string(model.StateRunning) {
			break
		}
	}
	for {
		got := ids(running.list(2 * time.Second))
		if _, ok := got[created]; ok {
			t.Fatalf("state=running shows the pending sandbox: %v", got)
		}
		if len(got) == 0 {
			break // A's left the running state
		}
	}
	// B's changes are nothing to A: B's project is not in A's events.
	e.lifecycle(t, sbB, "pause", e.keyB).want(t, http.StatusAccepted)
	select {
	case l := <-labelled.lines:
		if l != "" && !strings.HasPrefix(l, ":") {
			t.Fatalf("another project's change produced %q", l)
		}
	case <-time.After(600 * time.Millisecond):
	}

	// Bad filters are refused before the stream starts; no key is 401;
	// a sandbox access token is not for this route.
	e.send(req{method: "GET", path: "/v1/watch/sandboxes?state=bogus", key: e.keyA, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.send(req{method: "GET", path: "/v1/watch/sandboxes", invalid: true}).wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
}

// TestWatchSandboxesStreamEnds: keepalives while nothing changes, and the
// handler returns when the client goes away.
func TestWatchSandboxesStreamEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runningSandbox(e.keyA)
	done := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.api.streamSandboxList(w, r, principal{project: e.projA, role: model.RoleMember},
			watchTiming{minGap: 10 * time.Millisecond, keepalive: 50 * time.Millisecond, poll: time.Hour, maxAge: time.Hour})
		done <- struct{}{}
	}))
	defer srv.Close()
	s := openSSE(t, srv.URL, "/", "", nil)
	if l := s.list(2 * time.Second); len(l.Sandboxes) != 1 {
		t.Fatalf("first event %+v", l)
	}
	if ev := s.next(2 * time.Second); ev.comment != "keepalive" {
		t.Fatalf("want a keepalive comment, got %+v", ev)
	}
	s.cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not return after the client went away")
	}
}

// TestWatchSandboxesCaps: one API key may hold WatchPerKey live lists,
// a project WatchPerProject; one more answers 429 too_many_watches, and
// a closed stream frees its place. Other keys' projects are not held up.
func TestWatchSandboxesCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The keys of project A: keyA and three more, 4 × 8 = 32.
	keys := []string{e.keyA}
	for i := range 3 {
		var k apiv1.APIKey
		e.do("POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "w%d"}`, e.projA, i)).
			want(t, http.StatusCreated).decode(t, &k)
		keys = append(keys, k.Token)
	}
	var streams []*sseReader
	for _, k := range keys {
		for range WatchPerKey {
			s := openSSE(t, e.srv.URL, "/v1/watch/sandboxes", k, nil)
			s.list(5 * time.Second)
			streams = append(streams, s)
		}
	}
	// The key's cap, then the project's (a fifth key of A has none open).
	e.do("GET", "/v1/watch/sandboxes", e.keyA, "").wantError(t, http.StatusTooManyRequests, apiv1.CodeTooManyWatches)
	var k5 apiv1.APIKey
	e.do("POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "w5"}`, e.projA)).
		want(t, http.StatusCreated).decode(t, &k5)
	var er apiv1.Error
	e.do("GET", "/v1/watch/sandboxes", k5.Token, "").wantError(t, http.StatusTooManyRequests, apiv1.CodeTooManyWatches).decode(t, &er)
	if !strings.Contains(er.Message, "project has 32 live sandbox lists open") {
		t.Errorf("project cap message %q", er.Message)
	}
	// Another project is not held up.
	openSSE(t, e.srv.URL, "/v1/watch/sandboxes", e.keyB, nil).list(5 * time.Second)
	// A closed stream frees its place (the handler notices and returns).
	streams[0].cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := openSSE(t, e.srv.URL, "/v1/watch/sandboxes", e.keyA, nil)
		if s.res.StatusCode == http.StatusOK {
			s.list(5 * time.Second)
			break
		}
		s.cancel()
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not free its place: %d", s.res.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// limit is capped as on GET /v1/sandboxes (parseSandboxQuery: 400
	// above maxListLimit, which the OpenAPI document states too).
}

// TestWatchSandboxesMaxAge: a stream ends after its time with a
// reconnect event (and a retry delay), so the client reconnects and is
// authenticated anew; its place is freed.
func TestWatchSandboxesMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runningSandbox(e.keyA)
	p := principal{keyID: "k", project: e.projA, role: model.RoleMember}
	done := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.api.streamSandboxList(w, r, p,
			watchTiming{minGap: 10 * time.Millisecond, keepalive: time.Hour, poll: 20 * time.Millisecond, maxAge: 300 * time.Millisecond})
		done <- struct{}{}
	}))
	defer srv.Close()
	s := openSSE(t, srv.URL, "/", "", nil)
	s.list(2 * time.Second)
	var retry bool
	for ev := (sseEvent{}); ev.name != apiv1.EventReconnect; {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatal("the stream ended without a reconnect event")
			}
			retry = retry || l == "retry: 1000"
			if l == "event: "+apiv1.EventReconnect {
				ev.name = apiv1.EventReconnect
			}
		case <-time.After(3 * time.Second):
			t.Fatal("no reconnect event")
		}
	}
	if !retry {
		t.Error("the reconnect event sets no retry delay")
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the handler did not return after its time")
	}
	for l := range s.lines {
		if strings.HasPrefix(l, "event: ") && l != "event: "+apiv1.EventReconnect {
			t.Errorf("an event after reconnect: %q", l)
		}
	}
	if !e.api.watches.Idle() {
		t.Error("the watch is still counted")
	}
}
