package dataplane

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// stdinSession stores a command session of `cat` with stdin and returns it.
func (f *fixture) stdinSession() model.CommandSession {
	f.t.Helper()
	cs := model.CommandSession{
		ID: model.NewCommandSessionID(), ProjectID: f.project, SandboxID: f.sandbox, ProcessID: model.NewProcessID(),
		Spec:      model.ProcessSpec{Args: []string{"cat"}, Stdin: true, Env: model.Env{}},
		TokenHash: make([]byte, 32), CreatedAt: f.clock(), ExpiresAt: f.clock().Add(120 * time.Second),
	}
	must(f.t, f.st.CreateCommandSession(context.Background(), cs, nil))
	return cs
}

// openStdin starts a stdin stream whose body sends one byte, then nothing
// until end is called or the test ends; the response (once the server
// answers) goes to the channel.
func openStdin(t *testing.T, base string, pid model.ProcessID, tok string) (res <-chan *http.Response, end func()) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	// One byte at once (an HTTP client sends a streamed request only once
	// its body has data), then nothing.
	req, err := http.NewRequest(http.MethodPost, base+apiv1.ProcessDataPath(pid.String(), "stdin"), io.MultiReader(strings.NewReader("x"), pr))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/octet-stream")
	out := make(chan *http.Response, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			close(out)
			return
		}
		out <- res
	}()
	return out, func() { pw.Close() }
}

// The flood of issue 27: one attachment token opened 600 stdin streams
// that sent nothing, each holding a connection. Stdin streams are now
// capped per token and per project like attachments: one more is refused
// with 429 too_many_stdin_streams, and a stream that ends gives its slot
// back.
func TestStdinStreamCaps(t *testing.T) {
	tests := []struct {
		name              string
		perToken, perProj int
		// tokens[i] is the session (0 or 1) the i-th stream's token is
		// for, each stream with a token of its own unless sameToken.
		sessions  []int
		sameToken bool
		wantFull  string // what the message of the refusal names
	}{
		{name: "per token", perToken: 2, perProj: 10, sessions: []int{0, 0, 0}, sameToken: true, wantFull: "attachment token"},
		{name: "per project", perToken: 10, perProj: 2, sessions: []int{0, 1, 1}, wantFull: "project"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			dp, err := New(Config{Store: f.st, Agents: f, Now: f.clock, Verifier: f.ring.Verifier(), NodeID: f.node,
				StdinPerToken: tc.perToken, StdinPerProject: tc.perProj})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			dp.Register(mux)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close) // after the streams' bodies end (cleanups run last first)
			sessions := []model.CommandSession{f.stdinSession(), f.stdinSession()}
			shared := f.token(sessions[0], auth.AllActions(), f.clock(), time.Time{})
			var held []<-chan *http.Response
			var ends []func()
			last := len(tc.sessions) - 1
			for i, s := range tc.sessions[:last] {
				tok := shared
				if !tc.sameToken {
					tok = f.token(sessions[s], auth.AllActions(), f.clock(), time.Time{})
				}
				res, end := openStdin(t, srv.URL, sessions[s].ProcessID, tok)
				held, ends = append(held, res), append(ends, end)
				waitFor(t, func() bool { return dp.stdins.Open(stdinCapProject, f.project.String()) == i+1 })
			}
			cs := sessions[tc.sessions[last]]
			tok := shared
			if !tc.sameToken {
				tok = f.token(cs, auth.AllActions(), f.clock(), time.Time{})
			}
			over, _ := openStdin(t, srv.URL, cs.ProcessID, tok)
			var res *http.Response
			select {
			case res = <-over:
			case <-time.After(5 * time.Second):
			}
			if res == nil {
				t.Fatal("the stream over the cap was not refused")
			}
			var e apiv1.Error
			_ = json.NewDecoder(res.Body).Decode(&e)
			res.Body.Close()
			if res.StatusCode != http.StatusTooManyRequests || e.Code != apiv1.CodeTooManyStdinStreams || !strings.Contains(e.Message, tc.wantFull) {
				t.Fatalf("one stdin stream over the cap: %d %+v, want 429 too_many_stdin_streams naming the %s", res.StatusCode, e, tc.wantFull)
			}
			// Streams that end give their slots back.
			for _, end := range ends {
				end()
			}
			for _, s := range sessions {
				_ = f.client.Signal(context.Background(), s.ProcessID.String(), "KILL")
			}
			for _, h := range held {
				if res := <-h; res != nil {
					res.Body.Close()
				}
			}
			waitFor(t, dp.stdins.Idle)
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A stdin stream that sends nothing for the stdin idle timeout is ended
// (through the API's body deadlines, as the server serves the data plane):
// 408 request_timeout, what came before it was written to the process,
// and its slot is given back. Before, such a stream stayed open as long as
// its client kept the connection (past its token's life).
func TestIdleStdinStreamEnds(t *testing.T) {
	const idle = 300 * time.Millisecond
	f := newFixture(t)
	a, err := api.New(api.Config{Store: f.st, Attach: f.ring.Issuer(), Logger: slog.New(slog.DiscardHandler), StdinIdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	f.dp.Register(mux)
	srv := httptest.NewServer(a.Wrap(mux))
	defer srv.Close()
	cs := f.stdinSession()
	tok := f.token(cs, auth.AllActions(), f.clock(), time.Time{})

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+apiv1.ProcessDataPath(cs.ProcessID.String(), "stdin"), pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	done := make(chan *http.Response, 1)
	start := time.Now()
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			close(done)
			return
		}
		done <- res
	}()
	if _, err := io.WriteString(pw, "hello\n"); err != nil {
		t.Fatal(err)
	}
	var res *http.Response
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
	}
	took := time.Since(start)
	if res == nil {
		t.Fatalf("the idle stdin stream got no answer within 10 s")
	}
	var e apiv1.Error
	_ = json.NewDecoder(res.Body).Decode(&e)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || e.Code != apiv1.CodeRequestTimeout || took > idle+3*time.Second {
		t.Fatalf("idle stdin stream: %d %+v after %s, want 408 request_timeout after about %s", res.StatusCode, e, took, idle)
	}
	waitFor(t, f.dp.stdins.Idle)
	// What came before the idle stretch reached the process.
	attach := f.get(f.srv.URL+"/data/v1/processes/"+cs.ProcessID.String()+"/attach", "Bearer "+tok, nil)
	defer attach.Body.Close()
	got := ""
	readEvents(t, attach.Body, func(ev sseEvent) bool {
		out, _ := output(t, []sseEvent{ev})
		got += out
		return strings.Contains(got, "hello")
	})
	if !strings.Contains(got, "hello") {
		t.Fatalf("the process printed %q, want the stdin sent before the idle stretch", got)
	}
	_ = f.client.Signal(context.Background(), cs.ProcessID.String(), "KILL")
}
