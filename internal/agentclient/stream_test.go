package agentclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

const mib = 1 << 20

// A process writing 50 MB with nobody reading finishes at its own pace;
// the agent keeps only the newest BufferBytes.
func TestLargeOutputWithoutReader(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	id := newID()
	start := time.Now()
	if _, err := c.Start(ctx, sh(id, "head -c 52428800 /dev/zero; echo tail")); err != nil {
		t.Fatal(err)
	}
	st := waitExited(t, c, id)
	if *st.ExitCode != 0 {
		t.Fatalf("exit %d", *st.ExitCode)
	}
	t.Logf("50 MB written without a reader in %v", time.Since(start))
	evs := readAll(t, c, id, 0)
	var kept int
	for _, ev := range evs {
		kept += len(ev.Data)
	}
	if evs[0].Type != agentproto.EventGap || kept > agent.DefaultBufferBytes {
		t.Fatalf("first event %s seq %d, %d bytes kept", evs[0].Type, evs[0].Seq, kept)
	}
	// The gap says exactly what was lost.
	if g := evs[0].Gap; !g.Exact || g.StdoutBytes+uint64(kept) != 52428800+5 || g.Events != evs[0].Seq {
		t.Fatalf("gap %+v with %d bytes kept", *g, kept)
	}
	if !bytes.HasSuffix(evs[len(evs)-2].Data, []byte("tail\n")) {
		t.Fatal("newest output not kept")
	}
}

// 50 MB (5 MB under the race detector) read live arrive complete and in order.
func TestLargeOutputLossless(t *testing.T) {
	transports(t, agent.Options{BufferBytes: 64 * mib}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		size := 50_000_000
		if raceEnabled {
			size = 5_000_000
		}
		// Non-repeating content, so reordering or duplication would show.
		script := fmt.Sprintf("seq 1 100000000 | head -c %d", size)
		want := sha256.New()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Stdout = want
		if err := cmd.Run(); err != nil {
			t.Fatalf("computing the expected output: %v", err)
		}
		start := time.Now()
		res, err := c.Run(ctxT(t), sh(newID(), script))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d MB through the agent in %v", size/1_000_000, time.Since(start))
		if len(res.Stdout) != size || res.ExitCode != 0 {
			t.Fatalf("got %d bytes, exit %d", len(res.Stdout), res.ExitCode)
		}
		if got := sha256.Sum256(res.Stdout); !bytes.Equal(got[:], want.Sum(nil)) {
			t.Fatal("output differs from what the command writes")
		}
	})
}

// A reader that reads slowly holds the process back (the agent stops
// reading its output while the buffer is full) and gets every byte.
func TestSlowReader(t *testing.T) {
	transports(t, agent.Options{BufferBytes: 256 << 10}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		const size = 4_000_000
		req := sh(id, "head -c 4000000 /dev/zero")
		req.HoldOutput = true // nothing is dropped before the stream below opens
		if _, err := c.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		s, err := c.Output(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var (
			last    uint64
			read    int
			exited  bool
			checked bool
		)
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Seq != last+1 || ev.Type == agentproto.EventGap {
				t.Fatalf("gap at seq %d (type %s) after %d", ev.Seq, ev.Type, last)
			}
			last = ev.Seq
			read += len(ev.Data)
			if ev.Type == agentproto.EventExit {
				exited = true
				continue
			}
			if !checked && read >= 64<<10 {
				// Far behind: the process must be held back.
				time.Sleep(300 * time.Millisecond)
				st, err := c.Status(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !st.Running {
					t.Fatal("the process finished while its reader was 3.9 MB behind: no back-pressure")
				}
				checked = true
			}
			time.Sleep(time.Millisecond)
		}
		if !exited || !checked || read != size {
			t.Fatalf("exited=%v checked=%v read=%d, want %d", exited, checked, read, size)
		}
	})
}

// A stream whose reader takes nothing for the stall timeout is reset by the
// agent; the process then goes on (no longer held back) and a later reader
// gets a gap for what was dropped.
func TestStalledReaderIsReset(t *testing.T) {
	srv := newServer(t, agent.Options{BufferBytes: 128 << 10, StallTimeout: 300 * time.Millisecond})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	id := newID()
	if _, err := c.Start(ctx, sh(id, "head -c 20000000 /dev/zero; echo end")); err != nil {
		t.Fatal(err)
	}
	s, err := c.Output(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Never read s: its window and the agent's buffer fill, the stream
	// stalls and is reset, and the process finishes.
	st := waitExited(t, c, id)
	if *st.ExitCode != 0 {
		t.Fatalf("exit %d", *st.ExitCode)
	}
	evs := readAll(t, c, id, 0)
	if evs[0].Type != agentproto.EventGap || evs[0].Gap.StdoutBytes == 0 {
		t.Fatalf("no gap after the stalled reader was reset: first %+v", evs[0])
	}
}

// The connection breaks in the middle of an output stream: the reader gets
// an error, the process keeps running, and Output with the last Seq
// resumes on a fresh connection without loss or duplication.
func TestReconnectMidStream(t *testing.T) {
	for _, transport := range []string{"unix", "pipe"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, agent.Options{})
			var rec *connRecorder
			if transport == "unix" {
				rec, _ = unixDialer(t, srv)
			} else {
				rec = pipeDialer(t, srv)
			}
			c := newClient(t, rec.Dial)
			ctx := ctxT(t)
			id := newID()
			dir := t.TempDir()
			// Prints numbers until told to stop, so it outlives the broken connection.
			req := sh(id, `i=0; while [ ! -e "$D/stop" ]; do echo $i; i=$((i+1)); sleep 0.005; done; echo bye`)
			req.Env = []string{"D=" + dir}
			if _, err := c.Start(ctx, req); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			var last uint64
			s, err := c.Output(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				ev, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				out.Write(ev.Data)
				last = ev.Seq
			}
			rec.closeAll()
			var streamErr error
			for {
				ev, err := s.Next()
				if err != nil {
					streamErr = err
					break
				}
				out.Write(ev.Data)
				last = ev.Seq
			}
			if errors.Is(streamErr, io.EOF) {
				t.Fatal("broken stream ended with io.EOF; want an error")
			}
			t.Logf("stream broke after seq %d: %v", last, streamErr)
			s.Close()
			if st, err := c.Status(ctx, id); err != nil || !st.Running {
				t.Fatalf("after the break: Status = %+v, %v", st, err)
			}
			if err := osWriteFile(dir + "/stop"); err != nil {
				t.Fatal(err)
			}
			s, err = c.Output(ctx, id, last)
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := s.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ev.Seq != last+1 {
					t.Fatalf("resumed at seq %d after %d", ev.Seq, last)
				}
				last = ev.Seq
				out.Write(ev.Data)
			}
			if rec.count() != 2 {
				t.Fatalf("%d connections dialled, want 2", rec.count())
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if lines[len(lines)-1] != "bye" {
				t.Fatalf("last line %q", lines[len(lines)-1])
			}
			for i, l := range lines[:len(lines)-1] {
				if l != fmt.Sprint(i) {
					t.Fatalf("line %d = %q: output lost or duplicated across the reconnect", i, l)
				}
			}
		})
	}
}

// The host side restarts (a new Client, as after an `airlock server`
// restart): processes kept running and their output and exit are there.
func TestHostRestart(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	ctx := ctxT(t)
	c1 := agentclient.New(rec.Dial, nil)
	id := newID()
	if _, err := c1.Start(ctx, sh(id, "echo before; sleep 0.3; echo after")); err != nil {
		t.Fatal(err)
	}
	idDone := newID()
	if _, err := c1.Run(ctx, sh(idDone, "exit 4")); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Info(ctx); !errors.Is(err, agentclient.ErrClosed) {
		t.Fatalf("Info on a closed client = %v", err)
	}
	c2 := newClient(t, rec.Dial)
	l, err := c2.List(ctx)
	if err != nil || len(l) != 2 {
		t.Fatalf("List = %+v, %v", l, err)
	}
	var out []byte
	for _, ev := range readAll(t, c2, id, 0) {
		out = append(out, ev.Data...)
	}
	if string(out) != "before\nafter\n" {
		t.Fatalf("output = %q", out)
	}
	if st, err := c2.Status(ctx, idDone); err != nil || *st.ExitCode != 4 {
		t.Fatalf("Status of exited process = %+v, %v", st, err)
	}
}

// The agent restarts (a new Server on the same socket): the client's next
// call redials by itself.
func TestClientRedialsAfterAgentRestart(t *testing.T) {
	srv1 := newServer(t, agent.Options{})
	path := socketPath(t)
	addr, _ := agentproto.ParseListenAddr("unix:" + path)
	serve := func(srv *agent.Server) func() {
		ln, err := agent.Listen(addr, agent.ListenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Serve(ctx, ln)
		}()
		return func() { cancel(); <-done }
	}
	stop1 := serve(srv1)
	rec := &connRecorder{dial: func(ctx context.Context) (netConn, error) {
		return dialUnix(ctx, path)
	}}
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	info1, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop1()
	srv1.Close()
	srv2 := newServer(t, agent.Options{Version: "second"})
	stop2 := serve(srv2) // removes the stale socket
	defer stop2()
	info2, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info2.AgentVersion != "second" || !info2.StartedAt.After(info1.StartedAt) || rec.count() != 2 {
		t.Fatalf("after restart: %+v (before %+v), %d dials", info2, info1, rec.count())
	}
}

// Many processes run and stream at once over one connection.
func TestManyConcurrentProcesses(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		const n = 60
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Run(ctx, sh(newID(), fmt.Sprintf("echo out-%d; sleep 0.2; echo err-%d >&2; exit %d", i, i, i%7)))
				if err != nil {
					t.Error(err)
					return
				}
				if string(res.Stdout) != fmt.Sprintf("out-%d\n", i) || string(res.Stderr) != fmt.Sprintf("err-%d\n", i) || res.ExitCode != i%7 {
					t.Errorf("process %d: %q %q %d", i, res.Stdout, res.Stderr, res.ExitCode)
				}
			}()
		}
		wg.Wait()
		l, err := c.List(ctx)
		if err != nil || len(l) != n {
			t.Fatalf("List: %d processes, %v", len(l), err)
		}
	})
}

func TestManyProcessesOneConnection(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Run(ctx, sh(newID(), "sleep 0.1; echo x")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if rec.count() != 1 {
		t.Fatalf("%d connections for concurrent requests, want 1", rec.count())
	}
}

// Exited records are kept up to MaxExited, newest first.
func TestExitedRetention(t *testing.T) {
	srv := newServer(t, agent.Options{MaxExited: 3})
	c := newClient(t, pipeDialer(t, srv).Dial)
	ctx := ctxT(t)
	var ids []string
	for range 5 {
		id := newID()
		ids = append(ids, id)
		if _, err := c.Run(ctx, agentproto.StartRequest{ID: id, Args: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	running := newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: running, Args: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	l, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range l {
		got = append(got, p.ID)
	}
	want := append(append([]string(nil), ids[2:]...), running)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if _, err := c.Status(ctx, ids[0]); !errors.Is(err, agentclient.ErrProcessNotFound) {
		t.Fatalf("pruned record: %v", err)
	}
	// A pruned ID can be used again.
	if _, err := c.Run(ctx, agentproto.StartRequest{ID: ids[0], Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
}

func TestExitedTTL(t *testing.T) {
	srv := newServer(t, agent.Options{ExitedTTL: 300 * time.Millisecond})
	c := newClient(t, pipeDialer(t, srv).Dial)
	ctx := ctxT(t)
	id := newID()
	if _, err := c.Run(ctx, agentproto.StartRequest{ID: id, Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Status(ctx, id)
		if errors.Is(err, agentclient.ErrProcessNotFound) {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("record still there after its TTL: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A background child that keeps stdout open does not hold back the exit
// event for longer than DrainTimeout.
func TestDrainTimeout(t *testing.T) {
	srv := newServer(t, agent.Options{DrainTimeout: 300 * time.Millisecond})
	c := newClient(t, pipeDialer(t, srv).Dial)
	start := time.Now()
	res, err := c.Run(ctxT(t), sh(newID(), "sleep 30 & echo started"))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exit event took %v", d)
	}
	if string(res.Stdout) != "started\n" || res.ExitCode != 0 {
		t.Fatalf("Run = %q, %d", res.Stdout, res.ExitCode)
	}
}

// Shutdown terminates running processes (readers get their exit events)
// and refuses new ones.
func TestShutdown(t *testing.T) {
	srv, err := agent.New(agent.Options{Logger: testLogger(t), DrainTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := pipeDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	polite, stubborn := newID(), newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: polite, Args: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, sh(stubborn, "trap '' TERM; echo ready; while :; do sleep 0.05; done")); err != nil {
		t.Fatal(err)
	}
	s, err := c.Output(ctx, stubborn, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(); err != nil || string(ev.Data) != "ready\n" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("shutdown took %v", time.Since(start))
	ev, err := s.Next()
	if err != nil || ev.Type != agentproto.EventExit || ev.Signal != "KILL" {
		t.Fatalf("stubborn process's last event %+v, %v; want exit by KILL", ev, err)
	}
	s.Close()
	// The connection is gone with the server; a fresh server-less dial fails.
	_, err = c.Status(ctx, polite)
	if err == nil {
		t.Fatal("Status after Shutdown succeeded")
	}
}

func TestShutdownRefusesStarts(t *testing.T) {
	srv := newServer(t, agent.Options{})
	ts := agentHandlerClient(t, srv)
	srv.Close()
	resp := ts.post(t, "/v1/processes", fmt.Sprintf(`{"id":%q,"args":["true"]}`, newID()))
	if resp.status != 503 || resp.errCode != agentproto.CodeShuttingDown {
		t.Fatalf("Start after Close = %d %q", resp.status, resp.errCode)
	}
}

// Exited records beyond ExitedBufferBytes keep their exit but not their output.
func TestExitedBufferBudget(t *testing.T) {
	srv := newServer(t, agent.Options{ExitedBufferBytes: 100 << 10})
	c := newClient(t, pipeDialer(t, srv).Dial)
	ctx := ctxT(t)
	var ids []string
	for i := range 3 {
		id := newID()
		ids = append(ids, id)
		res, err := c.Run(ctx, sh(id, fmt.Sprintf("head -c 60000 /dev/zero; exit %d", i)))
		if err != nil || len(res.Stdout) != 60000 {
			t.Fatalf("Run %d: %d bytes, %v", i, len(res.Stdout), err)
		}
	}
	// The exit event is readable a moment before the agent files the
	// record among the exited ones: poll.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < len(ids); i++ {
		evs := readAll(t, c, ids[i], 0)
		var n int
		for _, ev := range evs {
			n += len(ev.Data)
		}
		last := evs[len(evs)-1]
		if last.Type != agentproto.EventExit || *last.ExitCode != i {
			t.Fatalf("process %d: last event %+v", i, last)
		}
		trimmed := i < 2
		if trimmed != (n == 0) || !trimmed && n != 60000 {
			if time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				i--
				continue
			}
			t.Fatalf("process %d keeps %d bytes of output", i, n)
		}
		if trimmed && (evs[0].Type != agentproto.EventGap || evs[0].Gap.StdoutBytes != 60000) {
			t.Fatalf("process %d: trimmed output without an exact gap: %+v", i, evs[0])
		}
	}
}
