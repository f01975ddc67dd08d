package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const greeting = `{"QMP": {"version": {"qemu": {"micro": 19, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7"}, "capabilities": ["oob"]}}`

// fake is the QEMU side of a connection, driven by each test.
type fake struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func (f *fake) send(line string) error {
	_, err := f.conn.Write([]byte(line + "\n"))
	return err
}

func (f *fake) recv() (request, error) {
	var r request
	line, err := f.r.ReadBytes('\n')
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(line, &r)
	return r, err
}

func (f *fake) reply(r request, ret string) error {
	return f.send(fmt.Sprintf(`{"return": %s, "id": %s}`, ret, r.ID))
}

func (f *fake) replyErr(r request, class, desc string) error {
	return f.send(fmt.Sprintf(`{"error": {"class": %q, "desc": %q}, "id": %s}`, class, desc, r.ID))
}

func event(name, data string) string {
	if data == "" {
		return fmt.Sprintf(`{"timestamp": {"seconds": 1700000000, "microseconds": 250}, "event": %q}`, name)
	}
	return fmt.Sprintf(`{"timestamp": {"seconds": 1700000000, "microseconds": 250}, "event": %q, "data": %s}`, name, data)
}

// serve runs fn as QEMU in a goroutine; errors are reported through t.Error.
func (f *fake) serve(fn func(f *fake) error) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := fn(f); err != nil {
			f.t.Errorf("fake qemu: %v", err)
		}
	}()
	return wg.Wait
}

// handshake plays the greeting and qmp_capabilities.
func handshake(f *fake) error {
	if err := f.send(greeting); err != nil {
		return err
	}
	r, err := f.recv()
	if err != nil {
		return err
	}
	if r.Execute != "qmp_capabilities" {
		return fmt.Errorf("first command %q, want qmp_capabilities", r.Execute)
	}
	return f.reply(r, "{}")
}

// pair returns a connected client and its fake QEMU (handshake done).
func pair(t *testing.T, opts Options) (*Client, *fake) {
	t.Helper()
	cc, sc := net.Pipe()
	f := &fake{t: t, conn: sc, r: bufio.NewReader(sc)}
	wait := f.serve(handshake)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewClient(ctx, cc, opts)
	wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); c.Close() })
	return c, f
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHandshakeAndQueryStatus(t *testing.T) {
	c, f := pair(t, Options{})
	if v := c.Version(); v.String() != "7.2.19" || v.Package == "" {
		t.Errorf("version %+v", v)
	}
	if caps := c.Capabilities(); len(caps) != 1 || caps[0] != "oob" {
		t.Errorf("capabilities %v", caps)
	}
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		if r.Execute != "query-status" || len(r.Arguments) != 0 {
			return fmt.Errorf("got %+v", r)
		}
		return f.reply(r, `{"status": "prelaunch", "singlestep": false, "running": false}`)
	})
	s, err := c.QueryStatus(ctxT(t, 5*time.Second))
	wait()
	if err != nil || s.Running || s.Status != StatusPrelaunch {
		t.Fatalf("status %+v, %v", s, err)
	}
}

func TestDialUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		f := &fake{t: t, conn: conn, r: bufio.NewReader(conn)}
		if err := handshake(f); err != nil {
			done <- err
			return
		}
		r, err := f.recv()
		if err == nil {
			err = f.reply(r, "{}")
		}
		done <- err
	}()
	c, err := Dial(ctxT(t, 5*time.Second), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Stop(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestErrorReplyCarriesClassAndDesc(t *testing.T) {
	c, f := pair(t, Options{})
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		return f.replyErr(r, "GenericError", "Migration is disabled when VM is in inmigrate state")
	})
	err := c.Cont(ctxT(t, 5*time.Second))
	wait()
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" || qe.Command != "cont" || !strings.Contains(qe.Desc, "inmigrate") {
		t.Fatalf("err %v (%#v)", err, qe)
	}
	if !strings.Contains(err.Error(), "GenericError") {
		t.Errorf("message %q", err)
	}
	// The connection is still good.
	wait = f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		return f.reply(r, "{}")
	})
	if err := c.Stop(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	wait()
}

func TestEventsInterleavedWithReplies(t *testing.T) {
	c, f := pair(t, Options{})
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		// Events before and after the reply, as QEMU sends STOP before stop's return.
		if err := f.send(event(EventStop, "")); err != nil {
			return err
		}
		if err := f.send(event(EventMigration, `{"status": "active"}`)); err != nil {
			return err
		}
		if err := f.reply(r, "{}"); err != nil {
			return err
		}
		return f.send(event(EventShutdown, `{"guest": false, "reason": "host-qmp-quit"}`))
	})
	if err := c.Stop(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	wait()
	want := []string{EventStop, EventMigration, EventShutdown}
	for i, name := range want {
		select {
		case ev := <-c.Events():
			if ev.Name != name {
				t.Fatalf("event %d: %s, want %s", i, ev.Name, name)
			}
			if ev.Timestamp.Unix() != 1700000000 || ev.Timestamp.Nanosecond() != 250000 {
				t.Errorf("timestamp %v", ev.Timestamp)
			}
			if name == EventMigration {
				var d struct{ Status string }
				if err := json.Unmarshal(ev.Data, &d); err != nil || d.Status != "active" {
					t.Errorf("data %s: %v", ev.Data, err)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %s", name)
		}
	}
}

func TestFullEventBufferDoesNotBlockReplies(t *testing.T) {
	c, f := pair(t, Options{EventBuffer: 1})
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if err := f.send(event(EventResume, "")); err != nil {
				return err
			}
		}
		return f.reply(r, "{}")
	})
	if err := c.Cont(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	wait()
	if n := c.DroppedEvents(); n != 2 {
		t.Errorf("dropped %d, want 2", n)
	}
}

func TestContextCancelThenLateReplyIsDropped(t *testing.T) {
	c, f := pair(t, Options{})
	got := make(chan request, 1)
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		got <- r
		return err
	})
	start := time.Now()
	_, err := c.QueryStatus(ctxT(t, 50*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	wait()
	stale := <-got
	// The next command sees the stale reply first; it must get its own.
	wait = f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		if string(r.ID) == string(stale.ID) {
			return fmt.Errorf("id reused: %s", r.ID)
		}
		if err := f.reply(stale, `{"status": "stale", "running": false}`); err != nil {
			return err
		}
		return f.reply(r, `{"status": "running", "running": true}`)
	})
	s, err := c.QueryStatus(ctxT(t, 5*time.Second))
	wait()
	if err != nil || s.Status != StatusRunning {
		t.Fatalf("status %+v, %v", s, err)
	}
}

func TestHungQEMUThatDoesNotReadCannotHangTheCaller(t *testing.T) {
	// net.Pipe is unbuffered: a peer that never reads blocks every write.
	c, f := pair(t, Options{})
	start := time.Now()
	err := c.Stop(ctxT(t, 50*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	// Nothing reached the peer, so the connection is still good.
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		if r.Execute != "cont" {
			return fmt.Errorf("got %s", r.Execute)
		}
		return f.reply(r, "{}")
	})
	if err := c.Cont(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	wait()

	// A peer that stops reading half-way through a command: the caller
	// returns, and the half-written command poisons the stream, so the
	// connection is closed.
	wait = f.serve(func(f *fake) error {
		_, err := f.conn.Read(make([]byte, 5))
		return err
	})
	err = c.Stop(ctxT(t, 50*time.Millisecond))
	wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after an interrupted write")
	}
	if err := c.Stop(ctxT(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestGreetingRespectsContext(t *testing.T) {
	cc, sc := net.Pipe()
	defer sc.Close()
	start := time.Now()
	_, err := NewClient(ctxT(t, 50*time.Millisecond), cc, Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestNotAGreeting(t *testing.T) {
	cc, sc := net.Pipe()
	defer sc.Close()
	go sc.Write([]byte("SSH-2.0-OpenSSH_9.2\n"))
	_, err := NewClient(ctxT(t, 5*time.Second), cc, Options{})
	if err == nil || !strings.Contains(err.Error(), "not a QMP greeting") {
		t.Fatalf("err %v", err)
	}
}

func TestCapabilitiesRefused(t *testing.T) {
	cc, sc := net.Pipe()
	defer sc.Close()
	f := &fake{t: t, conn: sc, r: bufio.NewReader(sc)}
	wait := f.serve(func(f *fake) error {
		if err := f.send(greeting); err != nil {
			return err
		}
		r, err := f.recv()
		if err != nil {
			return err
		}
		return f.replyErr(r, "CommandNotFound", "The command qmp_capabilities has not been found")
	})
	_, err := NewClient(ctxT(t, 5*time.Second), cc, Options{})
	wait()
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("err %v", err)
	}
}

func TestDisconnectEndsWaitsAndEvents(t *testing.T) {
	c, f := pair(t, Options{})
	wait := f.serve(func(f *fake) error {
		if _, err := f.recv(); err != nil {
			return err
		}
		return f.conn.Close()
	})
	_, err := c.QueryStatus(ctxT(t, 5*time.Second))
	wait()
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v", err)
	}
	<-c.Done()
	if _, ok := <-c.Events(); ok {
		t.Fatal("events channel open")
	}
	if err := c.Cont(ctxT(t, time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestOversizedLineClosesConnection(t *testing.T) {
	c, f := pair(t, Options{MaxLine: 1024})
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		big := fmt.Sprintf(`{"return": {"x": %q}, "id": %s}`, strings.Repeat("a", 200<<10), r.ID)
		f.send(big) // the client may close mid-write
		return nil
	})
	_, err := c.QueryStatus(ctxT(t, 5*time.Second))
	wait()
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "longer than 1024") {
		t.Fatalf("err %v", err)
	}
}

func TestMalformedMessageClosesConnection(t *testing.T) {
	c, f := pair(t, Options{})
	wait := f.serve(func(f *fake) error {
		if _, err := f.recv(); err != nil {
			return err
		}
		f.send(`{"return": `)
		return nil
	})
	_, err := c.QueryStatus(ctxT(t, 5*time.Second))
	wait()
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("err %v", err)
	}
}

func TestConcurrentCallersGetTheirOwnReplies(t *testing.T) {
	c, f := pair(t, Options{})
	const n = 20
	wait := f.serve(func(f *fake) error {
		for i := 0; i < n; i++ {
			r, err := f.recv()
			if err != nil {
				return err
			}
			// One at a time: no second request may be on the wire yet.
			f.conn.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
			if _, err := f.r.Peek(1); err == nil {
				return fmt.Errorf("a second request before the reply to %s", r.ID)
			}
			f.conn.SetReadDeadline(time.Time{})
			if err := f.reply(r, fmt.Sprintf(`{"echo": %s}`, r.Arguments)); err != nil {
				return err
			}
		}
		return nil
	})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				Echo struct{ N int }
			}
			if err := c.Execute(ctxT(t, 10*time.Second), "echo", map[string]int{"n": i}, &out); err != nil {
				t.Error(err)
				return
			}
			if out.Echo.N != i {
				t.Errorf("caller %d got %d", i, out.Echo.N)
			}
		}()
	}
	wg.Wait()
	wait()
}

func TestQuit(t *testing.T) {
	for _, replies := range []bool{true, false} {
		t.Run(fmt.Sprintf("reply=%v", replies), func(t *testing.T) {
			c, f := pair(t, Options{})
			wait := f.serve(func(f *fake) error {
				r, err := f.recv()
				if err != nil {
					return err
				}
				if r.Execute != "quit" {
					return fmt.Errorf("got %s", r.Execute)
				}
				if replies {
					f.reply(r, "{}")
					f.send(event(EventShutdown, `{"guest": false, "reason": "host-qmp-quit"}`))
				}
				return f.conn.Close()
			})
			if err := c.Quit(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			wait()
		})
	}
}

func TestWaitMigration(t *testing.T) {
	c, f := pair(t, Options{})
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		var a struct{ URI string }
		json.Unmarshal(r.Arguments, &a)
		if r.Execute != "migrate" || a.URI != "exec:cat > /x" {
			return fmt.Errorf("got %s %s", r.Execute, r.Arguments)
		}
		if err := f.reply(r, "{}"); err != nil {
			return err
		}
		for _, st := range []string{`{"status": "setup"}`, `{"status": "active", "ram": {"transferred": 5}}`,
			`{"status": "completed", "total-time": 700, "downtime": 3, "ram": {"transferred": 94000000}}`} {
			r, err := f.recv()
			if err != nil {
				return err
			}
			if r.Execute != "query-migrate" {
				return fmt.Errorf("got %s", r.Execute)
			}
			if err := f.reply(r, st); err != nil {
				return err
			}
		}
		// A second migration that fails.
		r, err = f.recv()
		if err != nil {
			return err
		}
		return f.reply(r, `{"status": "failed", "error-desc": "Unable to write to command: Broken pipe"}`)
	})
	ctx := ctxT(t, 5*time.Second)
	if err := c.Migrate(ctx, "exec:cat > /x"); err != nil {
		t.Fatal(err)
	}
	m, err := c.WaitMigration(ctx, time.Millisecond)
	if err != nil || m.TotalTime != 700 || m.RAM == nil || m.RAM.Transferred != 94000000 {
		t.Fatalf("%+v, %v", m, err)
	}
	_, err = c.WaitMigration(ctx, time.Millisecond)
	wait()
	var me *MigrationError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "Broken pipe") {
		t.Fatalf("err %v", err)
	}
}

func TestCancelledContextLeavesConnectionUsable(t *testing.T) {
	c, f := pair(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 20; i++ {
		if err := c.Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	}
	wait := f.serve(func(f *fake) error {
		r, err := f.recv()
		if err != nil {
			return err
		}
		if r.Execute != "cont" {
			return fmt.Errorf("got %s", r.Execute)
		}
		return f.reply(r, "{}")
	})
	if err := c.Cont(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	wait()
}
