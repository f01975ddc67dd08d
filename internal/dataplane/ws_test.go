package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
)

// specSession creates a command session with spec and returns its process
// ID and token.
func (f *fixture) specSession(spec model.ProcessSpec) (model.ProcessID, string) {
	return f.sessionSpec(spec)
}

func (f *fixture) wsURL(pid model.ProcessID) string {
	return f.srv.URL + apiv1.ProcessDataPath(pid.String(), "ws")
}

// wsClient is a test client of the WebSocket protocol.
type wsClient struct {
	t    *testing.T
	ctx  context.Context
	conn *websocket.Conn
}

// dialWS opens the WebSocket of pid with tok (query: extra query string).
func (f *fixture) dialWS(ctx context.Context, pid model.ProcessID, tok, query string) *wsClient {
	f.t.Helper()
	h := http.Header{"Authorization": {"Bearer " + tok}}
	conn, resp, err := websocket.Dial(ctx, f.wsURL(pid)+query, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		f.t.Fatalf("dial: %v (status %d)", err, status)
	}
	conn.SetReadLimit(16 << 20)
	f.t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: f.t, ctx: ctx, conn: conn}
}

// wsMsg is one server message: output or a control event.
type wsMsg struct {
	kind byte // apiv1.WSStdout, WSStderr; 0 for a text message
	seq  uint64
	data []byte
	ev   apiv1.WSEvent
}

func (c *wsClient) next() (wsMsg, error) {
	typ, data, err := c.conn.Read(c.ctx)
	if err != nil {
		return wsMsg{}, err
	}
	if typ == websocket.MessageBinary {
		if len(data) < apiv1.WSOutputHeader {
			c.t.Fatalf("short binary message %q", data)
		}
		return wsMsg{kind: data[0], seq: binary.BigEndian.Uint64(data[1:9]), data: data[9:]}, nil
	}
	var m wsMsg
	if err := json.Unmarshal(data, &m.ev); err != nil {
		c.t.Fatalf("bad text message %q: %v", data, err)
	}
	return m, nil
}

// readUntil reads messages until stop returns true or the socket ends; it
// returns the stdout seen and the messages.
func (c *wsClient) readUntil(stop func(wsMsg, string) bool) (string, []wsMsg, error) {
	c.t.Helper()
	var out strings.Builder
	var msgs []wsMsg
	for {
		m, err := c.next()
		if err != nil {
			return out.String(), msgs, err
		}
		msgs = append(msgs, m)
		if m.kind == apiv1.WSStdout {
			out.Write(m.data)
		}
		if stop != nil && stop(m, out.String()) {
			return out.String(), msgs, nil
		}
	}
}

// untilExit reads until the exit event and the server's close.
func (c *wsClient) untilExit() (string, apiv1.WSEvent) {
	c.t.Helper()
	out, msgs, err := c.readUntil(nil)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		c.t.Fatalf("socket ended with %v, want a normal closure (output %q, messages %+v)", err, out, msgs)
	}
	last := msgs[len(msgs)-1].ev
	if last.Type != apiv1.EventExit || last.ExitEventData == nil {
		c.t.Fatalf("last message %+v, want exit (output %q)", last, out)
	}
	return out, last
}

func (c *wsClient) send(b []byte) {
	c.t.Helper()
	must(c.t, c.conn.Write(c.ctx, websocket.MessageBinary, b))
}

func (c *wsClient) control(m apiv1.WSClientMessage) {
	c.t.Helper()
	b, _ := json.Marshal(m)
	must(c.t, c.conn.Write(c.ctx, websocket.MessageText, b))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func contains(s string) func(wsMsg, string) bool {
	return func(_ wsMsg, out string) bool { return strings.Contains(out, s) }
}

func TestWSInteractive(t *testing.T) {
	cases := []struct {
		name     string
		spec     model.ProcessSpec
		drive    func(t *testing.T, c *wsClient)
		wantOut  []string // substrings of stdout, in order
		wantCode int
		wantSig  string
	}{
		{
			name: "echo through cat, then eof",
			spec: model.ProcessSpec{Args: []string{"cat"}, Stdin: true},
			drive: func(t *testing.T, c *wsClient) {
				c.send([]byte("hello "))
				c.send([]byte("world\n"))
				if _, _, err := c.readUntil(contains("hello world\n")); err != nil {
					t.Fatal(err)
				}
				c.send([]byte("bye\n"))
				c.control(apiv1.WSClientMessage{Type: apiv1.WSEOF})
			},
			wantOut: []string{"bye\n"}, // hello world was read by drive
		},
		{
			// The process exits while the client is connected and idle:
			// the exit event must not wait for more stdin.
			name: "exit code with stdin still open",
			spec: model.ProcessSpec{Args: []string{"sh", "-c", "read x; echo got $x; exit 3"}, Stdin: true},
			drive: func(t *testing.T, c *wsClient) {
				c.send([]byte("abc\n"))
			},
			wantOut:  []string{"got abc\n"},
			wantCode: 3,
		},
		{
			name: "pty size and resize",
			spec: model.ProcessSpec{Args: []string{"sh", "-c", "stty size; read x; stty size"}, Stdin: true,
				PTY: &model.TermSize{Rows: 24, Cols: 80}},
			drive: func(t *testing.T, c *wsClient) {
				if _, _, err := c.readUntil(contains("24 80")); err != nil {
					t.Fatal(err)
				}
				c.control(apiv1.WSClientMessage{Type: apiv1.WSResize, Rows: 30, Cols: 100})
				time.Sleep(50 * time.Millisecond) // the resize is applied before the next line is read
				c.send([]byte("\n"))
			},
			wantOut: []string{"30 100"},
		},
		{
			name: "signal INT",
			spec: model.ProcessSpec{Args: []string{"sh", "-c", "echo ready; exec sleep 30"}},
			drive: func(t *testing.T, c *wsClient) {
				if _, _, err := c.readUntil(contains("ready")); err != nil {
					t.Fatal(err)
				}
				c.control(apiv1.WSClientMessage{Type: apiv1.WSSignal, Signal: "INT"})
			},
			wantCode: -1,
			wantSig:  "INT",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			pid, tok := f.specSession(tc.spec)
			c := f.dialWS(testCtx(t), pid, tok, "")
			tc.drive(t, c)
			out, exit := c.untilExit()
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
			if exit.ExitCode != tc.wantCode || exit.ExitEventData.Signal != tc.wantSig {
				t.Errorf("exit %+v, want code %d signal %q", *exit.ExitEventData, tc.wantCode, tc.wantSig)
			}
		})
	}
}

func TestWSRequestErrorsKeepTheSession(t *testing.T) {
	f := newFixture(t)
	// No terminal and no stdin: resize and stdin fail, the session goes on.
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"sh", "-c", "sleep 0.5; echo done"}})
	c := f.dialWS(testCtx(t), pid, tok, "")
	c.control(apiv1.WSClientMessage{Type: apiv1.WSResize, Rows: 10, Cols: 10})
	c.send([]byte("x"))
	c.control(apiv1.WSClientMessage{Type: "bogus"})
	out, msgs, err := c.readUntil(nil)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure || out != "done\n" {
		t.Fatalf("output %q, end %v", out, err)
	}
	got := map[string]string{}
	for _, m := range msgs {
		if m.ev.Type == apiv1.EventError {
			got[m.ev.Request] = m.ev.Code
		}
	}
	want := map[string]string{"resize": apiv1.CodeNoPTY, "stdin": apiv1.CodeNoStdin, "bogus": apiv1.CodeInvalidRequest}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("error for %s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestWSGapAfterOverflowWithoutReader(t *testing.T) {
	f := newFixture(t)
	// 8 MB of output, more than the agent's 4 MiB buffer, with nobody reading.
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"head", "-c", "8000000", "/dev/zero"}})
	ctx := testCtx(t)
	cs, err := f.st.GetCommandSessionByProcess(ctx, pid)
	must(t, err)
	must(t, agentguest.Start(ctx, f.client, cs, false))
	_, err = f.client.Wait(ctx, pid.String())
	must(t, err)

	c := f.dialWS(ctx, pid, tok, "")
	var gap *apiv1.GapEventData
	total := 0
	_, _, err = c.readUntil(func(m wsMsg, _ string) bool {
		total += len(m.data)
		if m.ev.Type == apiv1.EventGap && gap == nil {
			gap = m.ev.GapEventData
		}
		return m.ev.Type == apiv1.EventExit
	})
	must(t, err)
	if gap == nil || gap.StdoutBytes == 0 {
		t.Fatalf("no gap event before the exit (gap %+v)", gap)
	}
	if uint64(total)+gap.StdoutBytes > 8000000 || (gap.Exact && uint64(total)+gap.StdoutBytes != 8000000) {
		t.Fatalf("received %d bytes and a gap of %+v; want 8000000 in all", total, *gap)
	}
}

func TestWSRefusals(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"true"}})
	_, otherTok := f.specSession(model.ProcessSpec{Args: []string{"true"}})
	expiring, expTok := f.specSession(model.ProcessSpec{Args: []string{"true"}})
	apiKey, _, _ := auth.GenerateAPIKey()
	cases := []struct {
		name   string
		pid    model.ProcessID
		tok    string
		query  string
		expire bool
		status int
		code   string
	}{
		{"API key", pid, apiKey, "", false, 401, apiv1.CodeWrongTokenKind},
		{"another process's token", pid, otherTok, "", false, 403, apiv1.CodePermissionDenied},
		{"bad after", pid, tok, "?after=x", false, 400, apiv1.CodeInvalidRequest},
		{"expired", expiring, expTok, "", true, 401, apiv1.CodeTokenExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.expire {
				f.advance(136 * time.Second)
			}
			h := http.Header{"Authorization": {"Bearer " + tc.tok}}
			conn, resp, err := websocket.Dial(testCtx(t), f.wsURL(tc.pid)+tc.query, &websocket.DialOptions{HTTPHeader: h})
			if err == nil {
				conn.CloseNow()
				t.Fatal("the upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("response %v, want status %d (err %v)", resp, tc.status, err)
			}
			var e apiv1.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code != tc.code {
				t.Fatalf("error %+v (%v), want code %s", e, err, tc.code)
			}
		})
	}
	if _, err := f.client.Status(context.Background(), pid.String()); err == nil {
		t.Fatal("a refused upgrade started the process")
	}
}

func TestWSResumesAfter(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	script := fmt.Sprintf("echo a; while [ ! -e %[1]s/go ]; do sleep 0.05; done; echo b", dir)
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"sh", "-c", script}})
	ctx := testCtx(t)
	c := f.dialWS(ctx, pid, tok, "")
	_, msgs, err := c.readUntil(func(m wsMsg, _ string) bool { return m.kind == apiv1.WSStdout })
	must(t, err)
	c.conn.CloseNow()
	must(t, touch(filepath.Join(dir, "go")))

	c = f.dialWS(ctx, pid, tok, fmt.Sprintf("?after=%d", msgs[len(msgs)-1].seq))
	out, exit := c.untilExit()
	if out != "b\n" || exit.ExitCode != 0 {
		t.Fatalf("resumed output %q, exit %+v; want only b", out, exit)
	}
}

func TestWSDrainSendsReconnect(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"sh", "-c", "echo up; exec sleep 30"}})
	c := f.dialWS(testCtx(t), pid, tok, "")
	_, _, err := c.readUntil(contains("up"))
	must(t, err)
	drainCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go f.dp.Drain(drainCtx)
	_, msgs, err := c.readUntil(nil)
	if websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("socket ended with %v, want going away", err)
	}
	last := msgs[len(msgs)-1].ev
	if last.Type != apiv1.EventReconnect || last.Seq == 0 || last.ReconnectEventData == nil || last.RetryMS <= 0 {
		t.Fatalf("last message %+v, want reconnect", last)
	}
	_ = f.client.Signal(context.Background(), pid.String(), "KILL")
}

// Closing the socket mid-stream ends every goroutine of the connection.
func TestWSCloseLeavesNoGoroutines(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"sh", "-c", "while :; do echo tick; sleep 0.01; done"}, Stdin: true})
	defer func() { _ = f.client.Signal(context.Background(), pid.String(), "KILL") }()
	ctx := testCtx(t)
	session := func() {
		c := f.dialWS(ctx, pid, tok, "")
		c.send([]byte("some stdin\n"))
		c.control(apiv1.WSClientMessage{Type: apiv1.WSSignal, Signal: "CONT"})
		if _, _, err := c.readUntil(contains("tick\ntick\ntick\n")); err != nil {
			t.Fatal(err)
		}
		c.conn.CloseNow() // no close handshake: the client just goes
	}
	settle := func() int {
		n := runtime.NumGoroutine()
		for range 50 {
			time.Sleep(50 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				return n
			}
			n = m
		}
		return n
	}
	session() // starts the process and the agent connection
	base := settle()
	const sessions = 10 // a leak of one goroutine each exceeds the tolerance
	for range sessions {
		session()
	}
	const tolerance = 3
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+tolerance {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines after %d closed sessions, %d before:\n%s", n, sessions, base, bytes.TrimSpace(buf))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A client that stops answering pings is dropped, and its attachment slot
// freed.
func TestWSDropsSilentClient(t *testing.T) {
	f := newFixture(t)
	dp, err := New(Config{Store: f.st, Agents: f, Now: f.clock, KeepAlive: 50 * time.Millisecond, AttachPerProcess: 1, Verifier: f.ring.Verifier(), NodeID: f.node})
	must(t, err)
	mux := http.NewServeMux()
	dp.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"sleep", "30"}})
	defer func() { _ = f.client.Signal(context.Background(), pid.String(), "KILL") }()
	ctx := testCtx(t)
	dial := func() (*websocket.Conn, *http.Response, error) {
		h := http.Header{"Authorization": {"Bearer " + tok}}
		return websocket.Dial(ctx, srv.URL+apiv1.ProcessDataPath(pid.String(), "ws"), &websocket.DialOptions{HTTPHeader: h})
	}
	silent, _, err := dial() // never reads, so never answers a ping
	must(t, err)
	defer silent.CloseNow()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, resp, err := dial()
		if err == nil {
			conn.CloseNow()
			return // the silent client's slot was freed
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("dial: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the silent client still holds its attachment")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWSReportsExecFailure(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.specSession(model.ProcessSpec{Args: []string{"no-such-program-anywhere"}})
	_, msgs, err := f.dialWS(testCtx(t), pid, tok, "").readUntil(nil)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure || len(msgs) != 1 {
		t.Fatalf("end %v, messages %+v", err, msgs)
	}
	ev := msgs[0].ev
	if ev.Type != apiv1.EventError || ev.Request != "" || ev.Error == nil || ev.Code != apiv1.CodeExecFailed {
		t.Fatalf("message %+v, want a final exec_failed error", ev)
	}
}
