package agentclient_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/procfs"
)

func TestInfo(t *testing.T) {
	transports(t, agent.Options{Version: "v1.2.3"}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		info, err := c.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.AgentVersion != "v1.2.3" || info.Protocol != agentproto.ProtocolVersion || info.Pid != os.Getpid() {
			t.Fatalf("Info = %+v", info)
		}
		if time.Since(info.StartedAt) > time.Minute || info.StartedAt.After(time.Now()) {
			t.Fatalf("StartedAt = %v", info.StartedAt)
		}
	})
}

func TestRunExitCodesAndStreams(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		tests := []struct {
			name, script   string
			stdout, stderr string
			code           int
			signal         string
		}{
			{"echo", "echo hello", "hello\n", "", 0, ""},
			{"exit code", "echo out; echo err >&2; exit 3", "out\n", "err\n", 3, ""},
			{"no output", "true", "", "", 0, ""},
			{"exit 255", "exit 255", "", "", 255, ""},
			{"binary bytes", `printf '\000\001\377'`, "\x00\x01\xff", "", 0, ""},
			{"killed by itself", "kill -KILL $$", "", "", -1, "KILL"},
			{"segv-like signal", "kill -USR1 $$", "", "", -1, "USR1"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := c.Run(ctxT(t), sh(newID(), tt.script))
				if err != nil {
					t.Fatal(err)
				}
				if string(res.Stdout) != tt.stdout || string(res.Stderr) != tt.stderr || res.ExitCode != tt.code || res.Signal != tt.signal {
					t.Fatalf("Run = stdout %q stderr %q code %d signal %q; want %q %q %d %q",
						res.Stdout, res.Stderr, res.ExitCode, res.Signal, tt.stdout, tt.stderr, tt.code, tt.signal)
				}
			})
		}
	})
}

func TestEventOrdering(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		// The process writes the next line only after the test has seen
		// the previous one, so the order across the two pipes is fixed
		// however slow the machine is.
		dir := t.TempDir()
		script := `w() { while [ ! -e "$D/$1" ]; do sleep 0.005; done; }
echo 1; w a; echo 2 >&2; w b; echo 3; w c; echo 4 >&2; exit 7`
		req := sh(id, script)
		req.Env = []string{"D=" + dir}
		if _, err := c.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		s, err := c.Output(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var evs []agentproto.Event
		for _, step := range []string{"a", "b", "c", ""} {
			ev, err := s.Next()
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			evs = append(evs, ev)
			if step != "" {
				if err := os.WriteFile(filepath.Join(dir, step), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		evs = append(evs, collect(t, s)...)
		want := []struct{ typ, data string }{
			{agentproto.EventStdout, "1\n"}, {agentproto.EventStderr, "2\n"},
			{agentproto.EventStdout, "3\n"}, {agentproto.EventStderr, "4\n"}, {agentproto.EventExit, ""},
		}
		if len(evs) != len(want) {
			t.Fatalf("got %d events: %+v", len(evs), evs)
		}
		for i, ev := range evs {
			if ev.Seq != uint64(i+1) || ev.Type != want[i].typ || string(ev.Data) != want[i].data {
				t.Fatalf("event %d = %+v, want seq %d %s %q", i, ev, i+1, want[i].typ, want[i].data)
			}
		}
		if last := evs[len(evs)-1]; *last.ExitCode != 7 || last.Signal != "" {
			t.Fatalf("exit event = %+v", last)
		}
		st, err := c.Status(ctx, id)
		if err != nil || st.Running || st.ExitCode == nil || *st.ExitCode != 7 || st.ExitedAt == nil || st.Pid <= 0 {
			t.Fatalf("Status = %+v, %v", st, err)
		}
	})
}

func TestCwdAndEnv(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		dir := t.TempDir()
		bin := filepath.Join(dir, "mybin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "hello-prog"), []byte("#!/bin/sh\necho \"prog $1 in $(pwd)\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(ctx, agentproto.StartRequest{
			ID:   newID(),
			Args: []string{"/bin/sh", "-c", `pwd; echo "$AGENT_VAR $REQ_VAR $HOME"`},
			Env:  []string{"REQ_VAR=from-request", "HOME=/home/req"},
			Cwd:  dir,
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := dir + "\nfrom-agent from-request /home/req\n"; string(res.Stdout) != want {
			t.Fatalf("stdout = %q, want %q", res.Stdout, want)
		}
		// Default cwd is /.
		res, err = c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"pwd"}})
		if err != nil || string(res.Stdout) != "/\n" {
			t.Fatalf("pwd = %q, %v", res.Stdout, err)
		}
		// Args[0] is resolved with the PATH of the process's environment.
		res, err = c.Run(ctx, agentproto.StartRequest{
			ID: newID(), Args: []string{"hello-prog", "x"}, Env: []string{"PATH=/nonexistent:" + bin + ":/bin"}, Cwd: "/tmp",
		})
		if err != nil || string(res.Stdout) != "prog x in /tmp\n" {
			t.Fatalf("hello-prog = %q, %v", res.Stdout, err)
		}
		// The agent's own PATH does not contain bin.
		_, err = c.Start(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"hello-prog"}})
		var ae *agentclient.Error
		if !errors.As(err, &ae) || ae.Code != agentproto.CodeExecFailed {
			t.Fatalf("Start hello-prog without PATH = %v", err)
		}
		// Relative PATH entries and relative executables resolve against cwd.
		res, err = c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"hello-prog"}, Env: []string{"PATH=mybin"}, Cwd: dir})
		if err != nil || string(res.Stdout) != "prog  in "+dir+"\n" {
			t.Fatalf("relative PATH = %q, %v", res.Stdout, err)
		}
		res, err = c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"./mybin/hello-prog", "y"}, Cwd: dir})
		if err != nil || string(res.Stdout) != "prog y in "+dir+"\n" {
			t.Fatalf("relative executable = %q, %v", res.Stdout, err)
		}
	})
}

func TestStartFailures(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		dir := t.TempDir()
		noexec := filepath.Join(dir, "noexec")
		if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		badFormat := filepath.Join(dir, "badformat")
		if err := os.WriteFile(badFormat, []byte("\x7fELFgarbage"), 0o755); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			req  agentproto.StartRequest
			code string
		}{
			{"not found", agentproto.StartRequest{Args: []string{"no-such-command-xyz"}}, agentproto.CodeExecFailed},
			{"absolute not found", agentproto.StartRequest{Args: []string{"/no/such/file"}}, agentproto.CodeExecFailed},
			{"not executable", agentproto.StartRequest{Args: []string{noexec}}, agentproto.CodeExecFailed},
			{"bad format", agentproto.StartRequest{Args: []string{badFormat}}, agentproto.CodeExecFailed},
			{"directory", agentproto.StartRequest{Args: []string{dir}}, agentproto.CodeExecFailed},
			{"missing cwd", agentproto.StartRequest{Args: []string{"true"}, Cwd: "/no/such/dir"}, agentproto.CodeExecFailed},
			{"cwd is a file", agentproto.StartRequest{Args: []string{"true"}, Cwd: noexec}, agentproto.CodeExecFailed},
			{"relative cwd", agentproto.StartRequest{Args: []string{"true"}, Cwd: "tmp"}, agentproto.CodeInvalidRequest},
			{"empty args", agentproto.StartRequest{}, agentproto.CodeInvalidRequest},
			{"empty argv0", agentproto.StartRequest{Args: []string{""}}, agentproto.CodeInvalidRequest},
			{"NUL in args", agentproto.StartRequest{Args: []string{"echo", "a\x00b"}}, agentproto.CodeInvalidRequest},
			{"bad env", agentproto.StartRequest{Args: []string{"true"}, Env: []string{"NOEQUALS"}}, agentproto.CodeInvalidRequest},
			{"empty env name", agentproto.StartRequest{Args: []string{"true"}, Env: []string{"=x"}}, agentproto.CodeInvalidRequest},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := ctxT(t)
				tt.req.ID = newID()
				_, err := c.Start(ctx, tt.req)
				var ae *agentclient.Error
				if !errors.As(err, &ae) || ae.Code != tt.code || ae.Status != http.StatusBadRequest || ae.Message == "" {
					t.Fatalf("Start = %v; want a 400 %s", err, tt.code)
				}
				if _, err := c.Status(ctx, tt.req.ID); !errors.Is(err, agentclient.ErrProcessNotFound) {
					t.Fatalf("a failed start left a record: Status = %v", err)
				}
				// The ID is free again.
				if res, err := c.Run(ctx, agentproto.StartRequest{ID: tt.req.ID, Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
					t.Fatalf("Run with the same ID = %+v, %v", res, err)
				}
			})
		}
		for _, bad := range []string{"", "proc_", "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "proc_AAAAAAAAAAAAAAAAAAAAAAAAAA", "../x"} {
			_, err := c.Start(ctxT(t), agentproto.StartRequest{ID: bad, Args: []string{"true"}})
			var ae *agentclient.Error
			if !errors.As(err, &ae) || ae.Code != agentproto.CodeInvalidRequest {
				t.Fatalf("Start with ID %q = %v", bad, err)
			}
		}
		if _, err := c.Status(ctxT(t), "not-an-id"); err == nil || errors.Is(err, agentclient.ErrProcessNotFound) {
			t.Fatalf("Status(bad id) = %v; want invalid_request", err)
		}
	})
}

func TestDuplicateID(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "0.3"}}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"true"}})
		var ae *agentclient.Error
		if !errors.Is(err, agentclient.ErrProcessExists) || !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			t.Fatalf("duplicate Start (running) = %v", err)
		}
		waitExited(t, c, id)
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"true"}}); !errors.Is(err, agentclient.ErrProcessExists) {
			t.Fatalf("duplicate Start (exited) = %v", err)
		}
		// Concurrent starts of one ID: exactly one wins.
		id = newID()
		var wg sync.WaitGroup
		results := make(chan error, 10)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"true"}})
				results <- err
			}()
		}
		wg.Wait()
		close(results)
		ok := 0
		for err := range results {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, agentclient.ErrProcessExists):
				t.Fatalf("concurrent Start: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d concurrent starts of one ID succeeded", ok)
		}
	})
}

func TestSignals(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		for _, sig := range []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"} {
			t.Run(sig, func(t *testing.T) {
				ctx := ctxT(t)
				id := newID()
				if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "100"}}); err != nil {
					t.Fatal(err)
				}
				if err := c.Signal(ctx, id, sig); err != nil {
					t.Fatal(err)
				}
				st := waitExited(t, c, id)
				if *st.ExitCode != -1 || st.Signal != sig {
					t.Fatalf("after %s: exit %d signal %q", sig, *st.ExitCode, st.Signal)
				}
				s, err := c.Output(ctx, id, 0)
				if err != nil {
					t.Fatal(err)
				}
				evs := collect(t, s)
				if last := evs[len(evs)-1]; last.Type != agentproto.EventExit || *last.ExitCode != -1 || last.Signal != sig {
					t.Fatalf("exit event = %+v", last)
				}
				var ae *agentclient.Error
				if err := c.Signal(ctx, id, "TERM"); !errors.As(err, &ae) || ae.Code != agentproto.CodeNotRunning {
					t.Fatalf("Signal after exit = %v", err)
				}
			})
		}
		t.Run("STOP and CONT", func(t *testing.T) {
			ctx := ctxT(t)
			id := newID()
			st, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "100"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Signal(ctx, id, "STOP"); err != nil {
				t.Fatal(err)
			}
			waitProcState(t, st.Pid, func(s byte) bool { return s == 'T' })
			if st, err := c.Status(ctx, id); err != nil || !st.Running {
				t.Fatalf("stopped process: %+v, %v", st, err)
			}
			if err := c.Signal(ctx, id, "CONT"); err != nil {
				t.Fatal(err)
			}
			waitProcState(t, st.Pid, func(s byte) bool { return s != 'T' })
			if err := c.Signal(ctx, id, "KILL"); err != nil {
				t.Fatal(err)
			}
			if st := waitExited(t, c, id); st.Signal != "KILL" {
				t.Fatalf("status %+v", st)
			}
		})
		t.Run("errors", func(t *testing.T) {
			ctx := ctxT(t)
			if err := c.Signal(ctx, newID(), "TERM"); !errors.Is(err, agentclient.ErrProcessNotFound) {
				t.Fatalf("Signal unknown process = %v", err)
			}
			id := newID()
			if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "100"}}); err != nil {
				t.Fatal(err)
			}
			var ae *agentclient.Error
			for _, bad := range []string{"", "SEGV", "term", "0", "65", "-9"} {
				if err := c.Signal(ctx, id, bad); !errors.As(err, &ae) || ae.Code != agentproto.CodeInvalidRequest {
					t.Fatalf("Signal %q = %v", bad, err)
				}
			}
			if err := c.Signal(ctx, id, "SIGKILL"); err != nil {
				t.Fatal(err)
			}
			waitExited(t, c, id)
		})
	})
}

// waitProcState polls /proc/PID/stat until the state letter satisfies ok.
func waitProcState(t *testing.T, pid int, ok func(byte) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, found := procfs.ReadStat(pid)
		if !found {
			t.Fatalf("process %d: no /proc/%d/stat", pid, pid)
		}
		if ok(st.State) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: state stays %q", pid, st.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestListAndStatus(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		l, err := c.List(ctx)
		if err != nil || len(l) != 0 {
			t.Fatalf("List on a fresh agent = %v, %v", l, err)
		}
		a, b := newID(), newID()
		if _, err := c.Run(ctx, agentproto.StartRequest{ID: a, Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		stB, err := c.Start(ctx, agentproto.StartRequest{ID: b, Args: []string{"sleep", "100"}})
		if err != nil {
			t.Fatal(err)
		}
		if stB.ID != b || !stB.Running || stB.Pid <= 0 || !slices.Equal(stB.Args, []string{"sleep", "100"}) || stB.ExitCode != nil {
			t.Fatalf("Start status = %+v", stB)
		}
		l, err = c.List(ctx)
		if err != nil || len(l) != 2 || l[0].ID != a || l[1].ID != b || l[0].Running || !l[1].Running {
			t.Fatalf("List = %+v, %v", l, err)
		}
		if _, err := c.Status(ctx, newID()); !errors.Is(err, agentclient.ErrProcessNotFound) {
			t.Fatalf("Status(unknown) = %v", err)
		}
		if _, err := c.Output(ctx, newID(), 0); !errors.Is(err, agentclient.ErrProcessNotFound) {
			t.Fatalf("Output(unknown) = %v", err)
		}
		if err := c.Signal(ctx, b, "KILL"); err != nil {
			t.Fatal(err)
		}
		waitExited(t, c, b)
	})
}

func TestResumeAfter(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		if _, err := c.Start(ctx, sh(id, "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.02; done")); err != nil {
			t.Fatal(err)
		}
		// Read the first 4 events live, then stop.
		s, err := c.Output(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var first []agentproto.Event
		for range 4 {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			first = append(first, ev)
		}
		s.Close()
		waitExited(t, c, id)
		all := readAll(t, c, id, 0)
		n := uint64(len(all))
		var out []byte
		for _, ev := range all {
			out = append(out, ev.Data...)
		}
		if all[n-1].Type != agentproto.EventExit || string(out) != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n" {
			t.Fatalf("%d events with output %q", n, out)
		}
		for i, ev := range first {
			if ev.Seq != all[i].Seq || !bytes.Equal(ev.Data, all[i].Data) {
				t.Fatalf("live event %d = %+v, replay %+v", i, ev, all[i])
			}
		}
		for _, after := range []uint64{1, 4, n / 2, n - 1} {
			rest := readAll(t, c, id, after)
			if uint64(len(rest)) != n-after || rest[0].Seq != after+1 || !slices.EqualFunc(rest, all[after:], eventEqual) {
				t.Fatalf("after=%d: %+v", after, rest)
			}
		}
		// After the exit event there is nothing more: a clean end.
		if rest := readAll(t, c, id, n); len(rest) != 0 {
			t.Fatalf("after=%d: %+v", n, rest)
		}
		if rest := readAll(t, c, id, 1000); len(rest) != 0 {
			t.Fatalf("after=1000: %+v", rest)
		}
	})
}

func eventEqual(a, b agentproto.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && bytes.Equal(a.Data, b.Data) && a.Signal == b.Signal &&
		(a.ExitCode == nil) == (b.ExitCode == nil) && (a.ExitCode == nil || *a.ExitCode == *b.ExitCode)
}

func readAll(t *testing.T, c *agentclient.Client, id string, after uint64) []agentproto.Event {
	t.Helper()
	s, err := c.Output(ctxT(t), id, after)
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s)
}

func TestBufferOverflowGap(t *testing.T) {
	transports(t, agent.Options{BufferBytes: 64 << 10}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		// 1 MiB in 4 KiB writes, then a marker on stderr.
		if _, err := c.Start(ctx, sh(id, "head -c 1048576 /dev/zero | dd bs=4096 2>/dev/null; sleep 0.2; echo done >&2")); err != nil {
			t.Fatal(err)
		}
		waitExited(t, c, id)
		evs := readAll(t, c, id, 0)
		if evs[0].Type != agentproto.EventGap || evs[0].Gap.StdoutBytes == 0 || evs[1].Seq != evs[0].Seq+1 {
			t.Fatalf("no gap: first %+v", evs[0])
		}
		total := 0
		for i, ev := range evs {
			if i > 0 && ev.Seq != evs[i-1].Seq+1 {
				t.Fatalf("gap inside the kept events at %d", ev.Seq)
			}
			total += len(ev.Data)
		}
		if total > 64<<10 {
			t.Fatalf("kept %d bytes, more than the 64 KiB buffer", total)
		}
		last := evs[len(evs)-1]
		if last.Type != agentproto.EventExit || *last.ExitCode != 0 {
			t.Fatalf("last event: seq %d type %s", last.Seq, last.Type)
		}
		if m := evs[len(evs)-2]; m.Type != agentproto.EventStderr || string(m.Data) != "done\n" {
			t.Fatalf("event before the exit: seq %d type %s, %d bytes", m.Seq, m.Type, len(m.Data))
		}
		// Asking for events in the gap gives a smaller gap, then the oldest kept one.
		if rest := readAll(t, c, id, 3); rest[0].Gap.Events != evs[0].Gap.Events-3 || rest[1].Seq != evs[1].Seq {
			t.Fatalf("after=3 starts with %+v then %d, want %d", rest[0].Gap, rest[1].Seq, evs[1].Seq)
		}
		// Run reports the loss.
		res, err := c.Run(ctx, sh(newID(), "head -c 4194304 /dev/zero; sleep 0.5; echo end"))
		if err != nil && !errors.Is(err, agentclient.ErrOutputLost) {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || !bytes.HasSuffix(res.Stdout, []byte("end\n")) {
			t.Fatalf("Run result code %d, %d bytes", res.ExitCode, len(res.Stdout))
		}
		if err == nil && len(res.Stdout) != 4194304+4 {
			t.Fatalf("Run without ErrOutputLost returned %d bytes", len(res.Stdout))
		}
	})
}

func TestConcurrentReaders(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		if _, err := c.Start(ctx, sh(id, "i=0; while [ $i -lt 100 ]; do echo out$i; echo err$i >&2; i=$((i+1)); sleep 0.002; done")); err != nil {
			t.Fatal(err)
		}
		const readers = 6
		results := make([][]agentproto.Event, readers)
		var wg sync.WaitGroup
		for r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r%2 == 1 {
					time.Sleep(time.Duration(r) * 20 * time.Millisecond) // join late
				}
				s, err := c.Output(ctx, id, 0)
				if err != nil {
					t.Error(err)
					return
				}
				defer s.Close()
				for {
					ev, err := s.Next()
					if errors.Is(err, io.EOF) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					results[r] = append(results[r], ev)
				}
			}()
		}
		wg.Wait()
		var out, errs strings.Builder
		for i, ev := range results[0] {
			if ev.Seq != uint64(i+1) {
				t.Fatalf("reader 0: event %d has seq %d", i, ev.Seq)
			}
			switch ev.Type {
			case agentproto.EventStdout:
				out.Write(ev.Data)
			case agentproto.EventStderr:
				errs.Write(ev.Data)
			}
		}
		var wantOut, wantErr strings.Builder
		for i := range 100 {
			fmt.Fprintf(&wantOut, "out%d\n", i)
			fmt.Fprintf(&wantErr, "err%d\n", i)
		}
		if out.String() != wantOut.String() || errs.String() != wantErr.String() {
			t.Fatalf("stdout/stderr content differ from what was written")
		}
		for r := 1; r < readers; r++ {
			if !slices.EqualFunc(results[r], results[0], eventEqual) {
				t.Fatalf("reader %d saw %d events, reader 0 saw %d (or different ones)", r, len(results[r]), len(results[0]))
			}
		}
	})
}
