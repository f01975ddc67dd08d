package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
)

// sessionSpec creates a command session with a full spec.
func (f *fixture) sessionSpec(spec model.ProcessSpec) (model.ProcessID, string) {
	f.t.Helper()
	if spec.Env == nil {
		spec.Env = model.Env{}
	}
	cs := model.CommandSession{
		ID: model.NewCommandSessionID(), ProjectID: f.project, SandboxID: f.sandbox, ProcessID: model.NewProcessID(),
		Spec: spec, TokenHash: make([]byte, 32), CreatedAt: f.clock(), ExpiresAt: f.clock().Add(120 * time.Second),
	}
	must(f.t, f.st.CreateCommandSession(context.Background(), cs, nil))
	return cs.ProcessID, f.token(cs, auth.AllActions(), f.clock(), time.Time{})
}

func (f *fixture) post(path, tok, contentType string, body io.Reader) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e apiv1.Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("status %d: body is not an Error: %v", resp.StatusCode, err)
	}
	return e.Code
}

// Stdin streams through the data plane into the process, in order, and
// close=1 ends it; what the process computed matches what was sent.
func TestStdinThroughDataPlane(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"sha256sum"}, Stdin: true})
	data := make([]byte, 16<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	// stdin before the first attach starts the process.
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "stdin"), tok, "application/octet-stream", bytes.NewReader(data[:5<<20])); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("stdin: status %d", resp.StatusCode)
	}
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "stdin")+"?close=1", tok, "application/octet-stream", bytes.NewReader(data[5<<20:])); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("stdin close: status %d", resp.StatusCode)
	}
	out, exit := output(t, readEvents(t, f.get(f.attachURL(pid.String()), "Bearer "+tok, nil).Body, nil))
	if !strings.HasPrefix(out, hex.EncodeToString(sum[:])) || exit.ExitCode != 0 {
		t.Fatalf("sha256sum printed %q, exit %+v", out, exit)
	}
	// Closed: more stdin is refused with a stable code.
	resp := f.post(apiv1.ProcessDataPath(pid.String(), "stdin"), tok, "application/octet-stream", strings.NewReader("x"))
	if resp.StatusCode != http.StatusConflict || errorCode(t, resp) != apiv1.CodeNoStdin {
		t.Fatalf("stdin after close: %d", resp.StatusCode)
	}
}

func TestSignalAndResizeThroughDataPlane(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"sh", "-c", "trap 'stty size; exit 5' USR1; stty size; while :; do sleep 0.05; done"},
		PTY: &model.TermSize{Rows: 24, Cols: 80}})
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	events := make(chan sseEvent, 64)
	go func() {
		readEvents(t, resp.Body, func(ev sseEvent) bool { events <- ev; return ev.name == apiv1.EventExit })
		close(events)
	}()
	var out strings.Builder
	waitFor := func(s string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(out.String(), s) {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("stream ended waiting for %q in %q", s, out.String())
				}
				o, _ := output(t, []sseEvent{ev})
				out.WriteString(o)
			case <-deadline:
				t.Fatalf("timed out waiting for %q in %q", s, out.String())
			}
		}
	}
	waitFor("24 80")
	bad := []struct {
		path, body string
		status     int
		code       string
	}{
		{"resize", `{"rows":0,"cols":80}`, 400, apiv1.CodeInvalidRequest},
		{"resize", `{"rows":10,"cols":10,"x":1}`, 400, apiv1.CodeInvalidRequest},
		{"signal", `{"signal":"NOPE"}`, 400, apiv1.CodeInvalidRequest},
		{"signal", `{"signal":"99"}`, 400, apiv1.CodeInvalidRequest},
		{"signal", strings.Repeat(" ", 5000), 413, apiv1.CodePayloadTooLarge},
	}
	for _, b := range bad {
		resp := f.post(apiv1.ProcessDataPath(pid.String(), b.path), tok, "application/json", strings.NewReader(b.body))
		if resp.StatusCode != b.status || errorCode(t, resp) != b.code {
			t.Fatalf("%s %s: status %d", b.path, b.body, resp.StatusCode)
		}
	}
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "resize"), tok, "application/json", strings.NewReader(`{"rows":40,"cols":100}`)); resp.StatusCode != 204 {
		t.Fatalf("resize: %d", resp.StatusCode)
	}
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "signal"), tok, "application/json", strings.NewReader(`{"signal":"SIGUSR1"}`)); resp.StatusCode != 204 {
		t.Fatalf("signal: %d", resp.StatusCode)
	}
	waitFor("40 100")
	for ev := range events {
		if ev.name == apiv1.EventExit {
			_, exit := output(t, []sseEvent{ev})
			if exit.ExitCode != 5 {
				t.Fatalf("exit %+v", exit)
			}
		}
	}
	// An API key is refused on the input routes too.
	apiKey, _, _ := auth.GenerateAPIKey()
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "signal"), apiKey, "application/json", strings.NewReader(`{"signal":"KILL"}`)); resp.StatusCode != 401 || errorCode(t, resp) != apiv1.CodeWrongTokenKind {
		t.Fatalf("API key on signal: %d", resp.StatusCode)
	}
}

// Output written while nobody was attached overflows the agent's buffer; the
// next reader gets a gap event saying exactly how much, then the rest.
func TestGapEventOverSSE(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"sh", "-c", "head -c 10000000 /dev/zero; echo end"}})
	cs, err := f.st.GetCommandSessionByProcess(context.Background(), pid)
	must(t, err)
	// A background start (as "background": true does): nobody is coming.
	must(t, agentguest.Start(context.Background(), f.client, cs, false))
	// Wait for the process to finish with nobody attached.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := f.client.Status(context.Background(), pid.String())
		if err == nil && !st.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("process did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	events := readEvents(t, f.get(f.attachURL(pid.String()), "Bearer "+tok, nil).Body, nil)
	if events[0].name != apiv1.EventGap {
		t.Fatalf("first event %+v, want gap", events[0])
	}
	var g apiv1.GapEventData
	must(t, json.Unmarshal([]byte(events[0].data), &g))
	out, exit := output(t, events[1:])
	if !g.Exact || g.StdoutBytes+uint64(len(out)) != 10000004 || exit.ExitCode != 0 || !strings.HasSuffix(out, "end\n") {
		t.Fatalf("gap %+v + %d bytes kept, exit %+v", g, len(out), exit)
	}
}

// Concurrent attachments are capped per process; one more gets 429.
func TestAttachLimits(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"sleep", "30"}})
	var open []*http.Response
	for range DefaultAttachPerToken {
		resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("attach: %d", resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	if resp.StatusCode != http.StatusTooManyRequests || errorCode(t, resp) != apiv1.CodeTooManyAttachments {
		t.Fatalf("one attach too many: %d", resp.StatusCode)
	}
	open[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed attachment was not released: %d", resp.StatusCode)
		}
		resp.Body.Close()
		time.Sleep(20 * time.Millisecond)
	}
	_ = f.client.Signal(context.Background(), pid.String(), "KILL")
}

// A drain refuses new attachments, lets open streams run, and at the
// deadline ends them with a reconnect event; a reconnect with
// Last-Event-ID to another data plane loses nothing.
func TestDrainEndsStreamsWithReconnect(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"sh", "-c", "i=0; while [ $i -lt 40 ]; do echo line$i; i=$((i+1)); sleep 0.05; done"}})
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	var mu sync.Mutex
	var first []sseEvent
	done := make(chan struct{})
	go func() {
		defer close(done)
		evs := readEvents(t, resp.Body, nil)
		mu.Lock()
		first = evs
		mu.Unlock()
	}()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	f.dp.Drain(ctx)
	<-done
	if !f.dp.Draining() {
		t.Fatal("not draining after Drain")
	}
	refused := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	if refused.StatusCode != http.StatusServiceUnavailable || errorCode(t, refused) != apiv1.CodeDraining {
		t.Fatalf("attach while draining: %d", refused.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	last := first[len(first)-1]
	if last.name != apiv1.EventReconnect {
		t.Fatalf("stream ended with %+v, want reconnect", last)
	}
	// Another replica (a fresh data plane over the same agent) resumes.
	other := newDataPlaneOver(t, f)
	lastID := ""
	for _, ev := range first {
		if ev.id != "" {
			lastID = ev.id
		}
	}
	rest := readEvents(t, getURL(t, other+"/data/v1/processes/"+pid.String()+"/attach", tok, lastID).Body, nil)
	out, exit := output(t, append(first, rest...))
	var want strings.Builder
	for i := range 40 {
		want.WriteString("line" + strconv.Itoa(i) + "\n")
	}
	if out != want.String() || exit.ExitCode != 0 {
		t.Fatalf("output across the drain:\n%q\nwant\n%q", out, want.String())
	}
}

// newDataPlaneOver serves a second data plane over f's store and agent and
// returns its URL.
func newDataPlaneOver(t *testing.T, f *fixture) string {
	t.Helper()
	dp, err := New(Config{Store: f.st, Agents: f, Now: f.clock, Verifier: f.ring.Verifier(), NodeID: f.node})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	dp.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func getURL(t *testing.T, url, tok, lastID string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A token narrowed to read cannot write stdin, signal or resize, on the
// HTTP routes or over a WebSocket.
func TestNarrowTokenRefusedInput(t *testing.T) {
	f := newFixture(t)
	pid, _ := f.sessionSpec(model.ProcessSpec{Args: []string{"cat"}, Stdin: true})
	cs, err := f.st.GetCommandSessionByProcess(context.Background(), pid)
	must(t, err)
	readOnly := f.token(cs, []auth.Action{auth.ActionRead}, f.clock(), time.Time{})
	for _, tc := range []struct{ route, ct, body string }{
		{"stdin", "application/octet-stream", "x"},
		{"signal", "application/json", `{"signal":"KILL"}`},
		{"resize", "application/json", `{"rows":1,"cols":1}`},
	} {
		resp := f.post(apiv1.ProcessDataPath(pid.String(), tc.route), readOnly, tc.ct, strings.NewReader(tc.body))
		if resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != apiv1.CodePermissionDenied {
			t.Fatalf("%s with a read-only token: %d", tc.route, resp.StatusCode)
		}
	}
	if _, err := f.client.Status(context.Background(), pid.String()); err == nil {
		t.Fatal("a refused request started the process")
	}
}
