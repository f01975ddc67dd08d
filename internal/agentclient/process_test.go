package agentclient_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// Stdin streams into the process and close-stdin ends its input.
func TestStdin(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sha256sum"}, Stdin: true}); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 8<<20)
		rand.Read(data)
		sum := sha256.Sum256(data)
		// In two parts: the first leaves stdin open.
		if err := c.Stdin(ctx, id, bytes.NewReader(data[:3<<20]), false); err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, id, bytes.NewReader(data[3<<20:]), true); err != nil {
			t.Fatal(err)
		}
		evs := readAll(t, c, id, 0)
		if got := string(evs[0].Data); !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
			t.Fatalf("sha256sum printed %q", got)
		}
		// Stdin is closed now; a process without stdin refuses too.
		var ae *agentclient.Error
		if err := c.Stdin(ctx, id, strings.NewReader("x"), false); !errors.As(err, &ae) || ae.Code != agentproto.CodeNoStdin {
			t.Fatalf("Stdin after close: %v", err)
		}
	})
}

func TestPTYAndResize(t *testing.T) {
	transports(t, agent.Options{}, func(t *testing.T, c *agentclient.Client, _ *agent.Server) {
		ctx := ctxT(t)
		id := newID()
		req := agentproto.StartRequest{ID: id, Args: []string{"/bin/sh", "-c", "stty size; read line; stty size; echo got:$line; tty >/dev/null && echo is-a-tty"},
			PTY: &agentproto.WindowSize{Rows: 24, Cols: 80}}
		if _, err := c.Start(ctx, req); err != nil {
			t.Fatal(err)
		}
		s, err := c.Output(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		next := func(want string) {
			for !strings.Contains(out.String(), want) {
				ev, err := s.Next()
				if err != nil {
					t.Fatalf("waiting for %q in %q: %v", want, out.String(), err)
				}
				out.Write(ev.Data)
			}
		}
		next("24 80")
		if err := c.Resize(ctx, id, agentproto.WindowSize{Rows: 50, Cols: 132}); err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, id, strings.NewReader("hello\n"), false); err != nil {
			t.Fatal(err)
		}
		next("50 132")
		next("got:hello")
		next("is-a-tty")
		s.Close()
		// Resize of a process without a terminal is refused.
		plain := newID()
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: plain, Args: []string{"sleep", "5"}}); err != nil {
			t.Fatal(err)
		}
		var ae *agentclient.Error
		if err := c.Resize(ctx, plain, agentproto.WindowSize{Rows: 1, Cols: 1}); !errors.As(err, &ae) || ae.Code != agentproto.CodeNoPTY {
			t.Fatalf("Resize without a PTY: %v", err)
		}
		_ = c.Signal(ctx, plain, "9")
	})
}

func TestWaitTimeoutAndSignalNumbers(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	id := newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "30"}, TimeoutMillis: 200}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || !st.TimedOut || st.Signal != "KILL" {
		t.Fatalf("after the timeout: %+v", st)
	}
	evs := readAll(t, c, id, 0)
	if last := evs[len(evs)-1]; last.Type != agentproto.EventExit || !last.TimedOut {
		t.Fatalf("exit event %+v", last)
	}
	// Wait is bounded by its context.
	id2 := newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: id2, Args: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(wctx, id2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}
	// Signals by number and with a SIG prefix.
	if err := c.Signal(ctx, id2, "15"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, id2); err != nil || st.Signal != "TERM" {
		t.Fatalf("after signal 15: %+v, %v", st, err)
	}
}

func TestUserIDs(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	res, err := c.Run(ctxT(t), agentproto.StartRequest{ID: newID(), Args: []string{"id", "-u"}, User: &agentproto.User{UID: 65534, GID: 65534}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(res.Stdout)) != "65534" {
		t.Fatalf("id -u = %q", res.Stdout)
	}
	_ = io.EOF
}

// Two starts of one ID race (an attach and a stdin write, say): the one
// told "exists" returns only once the process can be found.
func TestConcurrentStartsFindTheProcess(t *testing.T) {
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	for range 20 {
		id := newID()
		req := agentproto.StartRequest{ID: id, Args: []string{"cat"}, Stdin: true}
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := c.Start(ctx, req)
				if errors.Is(err, agentclient.ErrProcessExists) {
					err = c.Stdin(ctx, id, strings.NewReader("x"), true)
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// A process started with HoldOutput is held back until its first reader
// opens a stream, so the moment between a start and the attach that asked
// for it loses nothing; the reader takes over the hold.
func TestHoldOutputUntilFirstReader(t *testing.T) {
	srv := newServer(t, agent.Options{BufferBytes: 256 << 10})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	for _, hold := range []bool{true, false} {
		id := newID()
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"head", "-c", "8000000", "/dev/zero"}, HoldOutput: hold}); err != nil {
			t.Fatal(err)
		}
		if hold {
			time.Sleep(300 * time.Millisecond) // held: it cannot finish without a reader
		} else {
			waitExited(t, c, id) // 8 MB through a 256 KiB buffer with nobody reading
		}
		evs := readAll(t, c, id, 0)
		n := 0
		for _, ev := range evs {
			n += len(ev.Data)
		}
		gap := evs[0].Type == agentproto.EventGap
		if hold && (gap || n != 8000000) {
			t.Fatalf("held: %d bytes, first event %s", n, evs[0].Type)
		}
		if !hold && !gap {
			t.Fatalf("not held: no gap (%d bytes)", n)
		}
	}
}
