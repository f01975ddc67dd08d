package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/envd"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb/processpbconnect"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

// envdEvents reads the events of a Start or Connect stream.
type envdEvents struct {
	receive func() bool
	msg     func() *processpb.ProcessEvent
	err     func() error
}

func startEvents(st *connect.ServerStreamForClient[processpb.StartResponse]) envdEvents {
	return envdEvents{st.Receive, func() *processpb.ProcessEvent { return st.Msg().GetEvent() }, st.Err}
}

func connectEvents(st *connect.ServerStreamForClient[processpb.ConnectResponse]) envdEvents {
	return envdEvents{st.Receive, func() *processpb.ProcessEvent { return st.Msg().GetEvent() }, st.Err}
}

// next returns the next event; the stream must not end.
func (e envdEvents) next(t *testing.T) *processpb.ProcessEvent {
	t.Helper()
	if !e.receive() {
		t.Fatalf("stream ended early: %v", e.err())
	}
	return e.msg()
}

// startPid reads the first event, which must be start.
func (e envdEvents) startPid(t *testing.T) uint32 {
	t.Helper()
	ev := e.next(t)
	if ev.GetStart() == nil || ev.GetStart().GetPid() == 0 {
		t.Fatalf("first event %v, want start with a pid", ev)
	}
	return ev.GetStart().GetPid()
}

// envdRun is what a stream delivered after its start event.
type envdRun struct {
	stdout, stderr, pty bytes.Buffer
	end                 *processpb.ProcessEvent_EndEvent
	keepalives          int
	biggest             int
}

// rest reads up to the end event and the end of the stream.
func (e envdEvents) rest(t *testing.T) *envdRun {
	t.Helper()
	r := &envdRun{}
	for e.receive() {
		ev := e.msg()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			r.stdout.Write(d.GetStdout())
			r.stderr.Write(d.GetStderr())
			r.pty.Write(d.GetPty())
			r.biggest = max(r.biggest, len(d.GetStdout()), len(d.GetStderr()), len(d.GetPty()))
		case ev.GetKeepalive() != nil:
			r.keepalives++
		case ev.GetEnd() != nil:
			if r.end != nil {
				t.Fatal("two end events")
			}
			r.end = ev.GetEnd()
		default:
			t.Fatalf("unexpected event %v", ev)
		}
	}
	if err := e.err(); err != nil {
		t.Fatalf("stream failed: %v", err)
	}
	if r.end == nil {
		t.Fatal("stream ended without an end event")
	}
	return r
}

func shCmd(script string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

func pidSel(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

func wantConnectCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
}

// TestE2BEnvdProcess drives E2B's process.Process service, translated to
// Airlock's API, with a real Connect client (JSON codec) and raw HTTP/1.1.
func TestE2BEnvdProcess(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 6*time.Minute)
	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)
	native, err := client.New(s.url, s.key)
	if err != nil {
		t.Fatal(err)
	}
	users := guestuser.NewCache()
	path, h := envd.NewProcessHandler(slog.Default())
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		if r.Header.Get("X-Test-No-Target") == "" {
			r = r.WithContext(target.With(r.Context(), target.Target{Sandbox: id, Native: native, User: user, Users: users}))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pc := processpbconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON())

	start := func(ctx context.Context, req *processpb.StartRequest) envdEvents {
		t.Helper()
		st, err := pc.Start(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		return startEvents(st)
	}
	run := func(t *testing.T, req *processpb.StartRequest) *envdRun {
		t.Helper()
		ev := start(ctx, req)
		ev.startPid(t)
		return ev.rest(t)
	}
	touch := func(t *testing.T, p string) {
		t.Helper()
		if _, err := native.Upload(ctx, id, model.GuestPath(p), 0o644, strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("echo", func(t *testing.T) {
		r := run(t, shCmd("echo hi"))
		if r.stdout.String() != "hi\n" || r.stderr.Len() != 0 {
			t.Fatalf("stdout %q stderr %q", r.stdout.String(), r.stderr.String())
		}
		if e := r.end; e.GetExitCode() != 0 || !e.GetExited() || e.GetStatus() != "exit status 0" || e.Error != nil {
			t.Fatalf("end %v", e)
		}
	})

	t.Run("stderr-exit-3", func(t *testing.T) {
		r := run(t, shCmd("echo err >&2; exit 3"))
		if r.stderr.String() != "err\n" || r.stdout.Len() != 0 {
			t.Fatalf("stdout %q stderr %q", r.stdout.String(), r.stderr.String())
		}
		if e := r.end; e.GetExitCode() != 3 || !e.GetExited() || e.GetStatus() != "exit status 3" || e.GetError() != "exit status 3" {
			t.Fatalf("end %v", e)
		}
	})

	t.Run("env-cwd-user", func(t *testing.T) {
		req := shCmd(`echo "$HOME $USER $LOGNAME $FOO $(pwd) $(id -u)"`)
		req.Process.Envs = map[string]string{"FOO": "bar"}
		cwd := "/tmp"
		req.Process.Cwd = &cwd
		if got := run(t, req).stdout.String(); got != "/root root root bar /tmp 0\n" {
			t.Fatalf("got %q", got)
		}
		if _, err := native.Mkdir(ctx, id, "/root/sub"); err != nil {
			t.Fatal(err)
		}
		rel := "sub" // relative to root's home
		req.Process.Cwd = &rel
		if got := run(t, req).stdout.String(); got != "/root root root bar /root/sub 0\n" {
			t.Fatalf("relative cwd: %q", got)
		}
		req2 := connect.NewRequest(shCmd("id -u; pwd"))
		req2.Msg.Process.Cwd = &cwd
		req2.Header().Set("Authorization", "Basic "+basic("nobody"))
		st, err := pc.Start(ctx, req2)
		if err != nil {
			t.Fatal(err)
		}
		ev := startEvents(st)
		ev.startPid(t)
		if got := ev.rest(t).stdout.String(); got != "65534\n/tmp\n" {
			t.Fatalf("as nobody: %q", got)
		}
	})

	t.Run("errors-before-start", func(t *testing.T) {
		missing := "/does/not/exist"
		req := shCmd("true")
		req.Process.Cwd = &missing
		st, _ := pc.Start(ctx, connect.NewRequest(req))
		if st.Receive() {
			t.Fatalf("got event %v for a missing cwd", st.Msg())
		}
		wantConnectCode(t, st.Err(), connect.CodeInvalidArgument)

		r := connect.NewRequest(shCmd("true"))
		r.Header().Set("Authorization", "Basic "+basic("nosuchuser"))
		st, _ = pc.Start(ctx, r)
		if st.Receive() {
			t.Fatal("unknown user started a process")
		}
		wantConnectCode(t, st.Err(), connect.CodeUnauthenticated)

		r = connect.NewRequest(shCmd("true"))
		r.Header().Set("X-Test-No-Target", "1")
		st, _ = pc.Start(ctx, r)
		if st.Receive() {
			t.Fatal("no target started a process")
		}
		wantConnectCode(t, st.Err(), connect.CodeUnauthenticated)
	})

	t.Run("streaming-order", func(t *testing.T) {
		ev := start(ctx, shCmd("echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second"))
		ev.startPid(t)
		if d := ev.next(t).GetData(); string(d.GetStdout()) != "first\n" {
			t.Fatalf("first data %v", d)
		}
		touch(t, "/tmp/go") // the process can only finish now
		r := ev.rest(t)
		if r.stdout.String() != "second\n" || r.end.GetExitCode() != 0 {
			t.Fatalf("rest %q, end %v", r.stdout.String(), r.end)
		}
	})

	t.Run("keepalive", func(t *testing.T) {
		req := connect.NewRequest(shCmd("sleep 2.5; echo x"))
		req.Header().Set("Keepalive-Ping-Interval", "1")
		st, err := pc.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ev := startEvents(st)
		ev.startPid(t)
		r := ev.rest(t)
		if r.keepalives < 1 || r.stdout.String() != "x\n" {
			t.Fatalf("%d keepalives, stdout %q", r.keepalives, r.stdout.String())
		}
	})

	t.Run("stdin", func(t *testing.T) {
		ev := start(ctx, shCmd("read line; echo got:$line"))
		pid := ev.startPid(t)
		_, err := pc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: pidSel(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("hello\n")}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if r := ev.rest(t); r.stdout.String() != "got:hello\n" {
			t.Fatalf("stdout %q", r.stdout.String())
		}
	})

	t.Run("stream-input", func(t *testing.T) {
		ev := start(ctx, shCmd("read a; read b; echo $a$b"))
		pid := ev.startPid(t)
		in := pc.StreamInput(ctx)
		msgs := []*processpb.StreamInputRequest{
			{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: pidSel(pid)}}},
			{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x\n")}}}}},
			{Event: &processpb.StreamInputRequest_Keepalive{Keepalive: &processpb.StreamInputRequest_KeepAlive{}}},
			{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("y\n")}}}}},
		}
		for _, m := range msgs {
			if err := in.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := in.CloseAndReceive(); err != nil {
			t.Fatal(err)
		}
		if r := ev.rest(t); r.stdout.String() != "xy\n" {
			t.Fatalf("stdout %q", r.stdout.String())
		}
	})

	t.Run("close-stdin", func(t *testing.T) {
		ev := start(ctx, shCmd("cat; echo done"))
		pid := ev.startPid(t)
		_, err := pc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: pidSel(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("abc")}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(pid)})); err != nil {
			t.Fatal(err)
		}
		if r := ev.rest(t); r.stdout.String() != "abcdone\n" {
			t.Fatalf("stdout %q", r.stdout.String())
		}
	})

	t.Run("stdin-false", func(t *testing.T) {
		no := false
		req := shCmd("cat; echo eof")
		req.Stdin = &no
		if r := run(t, req); r.stdout.String() != "eof\n" {
			t.Fatalf("stdout %q", r.stdout.String())
		}
	})

	t.Run("sigkill", func(t *testing.T) {
		ev := start(ctx, shCmd("echo up; sleep 1000"))
		pid := ev.startPid(t)
		ev.next(t) // "up": the shell runs
		_, err := pc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(pid), Signal: processpb.Signal_SIGNAL_SIGKILL}))
		if err != nil {
			t.Fatal(err)
		}
		e := ev.rest(t).end
		if e.GetExitCode() != -1 || e.GetExited() || e.GetStatus() != "signal: killed" || e.GetError() != "signal: killed" {
			t.Fatalf("end %v", e)
		}
	})

	t.Run("pty", func(t *testing.T) {
		req := shCmd("read x; stty size")
		req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: 80, Rows: 24}}
		ev := start(ctx, req)
		pid := ev.startPid(t)
		_, err := pc.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: pidSel(pid), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 100, Rows: 40}}}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = pc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: pidSel(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("\n")}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		r := ev.rest(t)
		if !strings.Contains(r.pty.String(), "40 100") || r.stdout.Len() != 0 {
			t.Fatalf("pty %q stdout %q", r.pty.String(), r.stdout.String())
		}
	})

	t.Run("background-list-connect", func(t *testing.T) {
		tag := "bg"
		req := shCmd("i=0; while [ ! -e /tmp/stop ]; do echo tick$i; i=$((i+1)); sleep 0.2; done; echo bye")
		req.Tag = &tag
		sctx, cancel := context.WithCancel(ctx)
		ev := start(sctx, req)
		pid := ev.startPid(t)
		cancel() // the client goes away: the process keeps running
		list, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var found *processpb.ProcessInfo
		for _, p := range list.Msg.GetProcesses() {
			if p.GetPid() == pid {
				found = p
			}
		}
		if found == nil || found.GetTag() != "bg" || found.GetConfig().GetCmd() != "/bin/sh" || len(found.GetConfig().GetArgs()) != 2 {
			t.Fatalf("list %v: process %d not found as started", list.Msg, pid)
		}
		time.Sleep(500 * time.Millisecond)
		cst, err := pc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{
			Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "bg"}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cst.Close() })
		cev := connectEvents(cst)
		if got := cev.startPid(t); got != pid {
			t.Fatalf("connect start pid %d, want %d", got, pid)
		}
		if d := cev.next(t).GetData(); !strings.HasPrefix(string(d.GetStdout()), "tick") {
			t.Fatalf("connect data %v", d)
		}
		touch(t, "/tmp/stop")
		r := cev.rest(t)
		if !strings.HasSuffix(r.stdout.String(), "bye\n") || r.end.GetExitCode() != 0 {
			t.Fatalf("connect rest %q, end %v", r.stdout.String(), r.end)
		}
	})

	t.Run("lifetime", func(t *testing.T) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second) // Connect-Timeout-Ms
		defer cancel()
		ev := start(tctx, shCmd("sleep 1000"))
		pid := ev.startPid(t)
		for ev.receive() {
		}
		wantConnectCode(t, ev.err(), connect.CodeDeadlineExceeded)
		deadline := time.Now().Add(15 * time.Second)
		for {
			list, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			alive := false
			for _, p := range list.Msg.GetProcesses() {
				alive = alive || p.GetPid() == pid
			}
			if !alive {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived its Connect-Timeout-Ms", pid)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("megabytes-lossless", func(t *testing.T) {
		const size = 3<<20 + 12345 // not a multiple of any buffer
		r := run(t, shCmd(fmt.Sprintf("head -c %d /dev/urandom > /tmp/big && cat /tmp/big", size)))
		if r.end.GetExitCode() != 0 || r.stdout.Len() != size {
			t.Fatalf("got %d bytes, end %v", r.stdout.Len(), r.end)
		}
		if r.biggest > 32<<10 {
			t.Fatalf("a data event of %d bytes", r.biggest)
		}
		sum := sha256.Sum256(r.stdout.Bytes())
		inside := run(t, shCmd("sha256sum /tmp/big")).stdout.String()
		if got := hex.EncodeToString(sum[:]); !strings.HasPrefix(inside, got) {
			t.Fatalf("sha256 received %s, inside %q", got, inside)
		}
	})

	t.Run("unknown-pid", func(t *testing.T) {
		const pid = 999999
		_, err := pc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(pid), Signal: processpb.Signal_SIGNAL_SIGKILL}))
		wantConnectCode(t, err, connect.CodeNotFound)
		_, err = pc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: pidSel(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x")}},
		}))
		wantConnectCode(t, err, connect.CodeNotFound)
		st, _ := pc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(pid)}))
		if st.Receive() {
			t.Fatal("connect to an unknown pid streamed")
		}
		wantConnectCode(t, st.Err(), connect.CodeNotFound)
	})

	t.Run("raw-http", func(t *testing.T) {
		testRawEnvdHTTP(ctx, t, srv.URL)
	})
}

func basic(user string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":"))
}

// testRawEnvdHTTP checks the Connect framing E2B's JS SDK relies on, byte
// by byte, over HTTP/1.1.
func testRawEnvdHTTP(ctx context.Context, t *testing.T, base string) {
	body := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi"]},"stdin":false}`)
	frames := rawStream(ctx, t, base+"/process.Process/Start", body)
	if len(frames) < 4 {
		t.Fatalf("%d frames: %q", len(frames), frames)
	}
	var first struct {
		Event struct {
			Start struct {
				Pid json.Number `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	if frames[0].flags != 0 || json.Unmarshal(frames[0].data, &first) != nil || first.Event.Start.Pid == "" {
		t.Fatalf("first frame %d %q, want start", frames[0].flags, frames[0].data)
	}
	all := ""
	for _, f := range frames[1 : len(frames)-1] {
		if f.flags != 0 {
			t.Fatalf("middle frame flags %d", f.flags)
		}
		all += string(f.data) + "\n"
	}
	for _, want := range []string{`{"event":{"data":{"stdout":"aGkK"}}}`, `"exited":true`, `"status":"exit status 0"`} {
		if !strings.Contains(all, want) {
			t.Fatalf("frames %q lack %s", all, want)
		}
	}
	if last := frames[len(frames)-1]; last.flags != 2 || string(last.data) != "{}" {
		t.Fatalf("last frame %d %q, want 2 {}", last.flags, last.data)
	}

	// An error of a streaming call: HTTP 200, the error in the end frame.
	frames = rawStream(ctx, t, base+"/process.Process/Connect", []byte(`{"process":{"pid":999999}}`))
	if len(frames) != 1 || frames[0].flags != 2 || !bytes.Contains(frames[0].data, []byte(`"code":"not_found"`)) {
		t.Fatalf("connect to an unknown pid: frames %q", frames)
	}

	// A unary error: its status and a JSON body with the code.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/process.Process/SendSignal",
		strings.NewReader(`{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !bytes.Contains(b, []byte(`"code":"not_found"`)) {
		t.Fatalf("unary error: %d %s", resp.StatusCode, b)
	}
}

type rawFrame struct {
	flags byte
	data  []byte
}

// rawStream makes a Connect server-streaming call with the JSON codec and
// returns its frames.
func rawStream(ctx context.Context, t *testing.T, url string, msg []byte) []rawFrame {
	t.Helper()
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(append(env, msg...)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" || resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/%d %d %s", resp.ProtoMajor, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var frames []rawFrame
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return frames
			}
			t.Fatalf("frame header: %v", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatalf("frame body: %v", err)
		}
		frames = append(frames, rawFrame{hdr[0], data})
	}
}
