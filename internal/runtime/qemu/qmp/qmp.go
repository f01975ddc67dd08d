// Package qmp is a small, typed client for the QEMU Machine Protocol over a
// Unix socket: the greeting, qmp_capabilities, one command at a time with ids
// matched to responses, and asynchronous events on a channel.
//
// It is written here rather than taken from github.com/digitalocean/go-qemu/qmp
// because that client cannot honour a context: its Run has no context and
// waits on its response stream with no deadline while holding its lock (a hung
// QEMU hangs the caller and every later caller), it does not use ids (a reply
// that arrives after its caller gave up is taken as the reply to the next
// command), its reader blocks on an unbuffered event channel (an event nobody
// reads stops responses too), and its 64 KiB bufio.Scanner stops the reader
// on a long line with nobody told. Those are the properties a sandbox driver
// needs most; the protocol itself is small.
//
// Every method takes a context: its deadline bounds the write, and the wait
// for the reply ends when the context does (the late reply is then dropped by
// its id). A connection that breaks ends every wait with an error wrapping
// ErrClosed.
package qmp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed: the connection is closed (by Close, by QEMU or by a protocol
// error); errors.Is matches it, and the wrapped error says why.
var ErrClosed = errors.New("qmp: connection closed")

// DefaultMaxLine is the longest line accepted from QEMU (replies such as
// query-qmp-schema are long; nothing a driver asks for comes near).
const DefaultMaxLine = 4 << 20

// Error is an error reply from QEMU: {"error": {"class": …, "desc": …}}.
type Error struct {
	Command string // the command it answers
	Class   string // e.g. GenericError, CommandNotFound, DeviceNotActive
	Desc    string // QEMU's human-readable description
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// Event is an asynchronous QMP event.
type Event struct {
	Name      string          // STOP, RESUME, SHUTDOWN, MIGRATION, …
	Data      json.RawMessage // the event's "data" member (may be empty)
	Timestamp time.Time
}

// Event names a driver cares about.
const (
	EventStop      = "STOP"
	EventResume    = "RESUME"
	EventShutdown  = "SHUTDOWN"
	EventMigration = "MIGRATION"
)

// Version is QEMU's version from the greeting.
type Version struct {
	Major, Minor, Micro int
	Package             string
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// Options tune a Client; the zero value is usable.
type Options struct {
	// MaxLine bounds one line from QEMU (default DefaultMaxLine); a longer
	// line is a protocol error that closes the connection.
	MaxLine int
	// EventBuffer is the capacity of the Events channel (default 64). The
	// reader never waits for an event's receiver: when the buffer is full
	// the event is dropped and counted (DroppedEvents).
	EventBuffer int
}

// Client is a QMP connection. Its methods are safe for concurrent use;
// commands are sent one at a time.
type Client struct {
	conn    net.Conn
	opts    Options
	version Version
	caps    []string

	sem    chan struct{} // one request at a time
	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan reply // by id
	err     error                 // set once, when the reader stops

	events  chan Event
	dropped atomic.Uint64
	done    chan struct{}
}

type reply struct {
	ret json.RawMessage
	err *Error
}

// wire is any message from QEMU.
type wire struct {
	QMP *struct {
		Version struct {
			QEMU struct {
				Major int `json:"major"`
				Minor int `json:"minor"`
				Micro int `json:"micro"`
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
		Capabilities []string `json:"capabilities"`
	} `json:"QMP"`
	Return    json.RawMessage               `json:"return"`
	Error     *struct{ Class, Desc string } `json:"error"`
	ID        json.RawMessage               `json:"id"`
	Event     string                        `json:"event"`
	Data      json.RawMessage               `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// Dial connects to the QMP socket at path, reads the greeting and negotiates
// capabilities. ctx bounds the whole handshake.
func Dial(ctx context.Context, path string, opts Options) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: dial %s: %w", path, err)
	}
	c, err := NewClient(ctx, conn, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewClient runs the handshake over an established connection (which the
// Client then owns: it is closed on error and by Close).
func NewClient(ctx context.Context, conn net.Conn, opts Options) (*Client, error) {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 64
	}
	c := &Client{
		conn:    conn,
		opts:    opts,
		sem:     make(chan struct{}, 1),
		pending: make(map[string]chan reply),
		events:  make(chan Event, opts.EventBuffer),
		done:    make(chan struct{}),
	}
	br := bufio.NewReaderSize(conn, 64<<10)

	// The greeting: a read that the context can interrupt.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	line, err := readLine(br, opts.MaxLine)
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("qmp: greeting: %w", context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: greeting: %w", err)
	}
	var g wire
	if err := json.Unmarshal(line, &g); err != nil || g.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: greeting: not a QMP greeting: %.200q", line)
	}
	v := g.QMP.Version
	c.version = Version{Major: v.QEMU.Major, Minor: v.QEMU.Minor, Micro: v.QEMU.Micro, Package: v.Package}
	c.caps = g.QMP.Capabilities

	go c.read(br)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Version is QEMU's version from the greeting.
func (c *Client) Version() Version { return c.version }

// Capabilities are the capabilities QEMU offered in its greeting (none are
// enabled by this client).
func (c *Client) Capabilities() []string { return append([]string(nil), c.caps...) }

// Events delivers asynchronous events; it is closed when the connection is.
func (c *Client) Events() <-chan Event { return c.events }

// DroppedEvents counts events dropped because the Events buffer was full.
func (c *Client) DroppedEvents() uint64 { return c.dropped.Load() }

// Done is closed when the connection is closed; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is open, then an error wrapping ErrClosed.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection and waits for the reader to stop.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// readLine reads one '\n'-terminated line of at most max bytes (without the
// newline).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > max+1 {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		buf = append(buf, frag...)
		if err == nil {
			return bytes.TrimRight(buf, "\r\n"), nil
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

func (c *Client) read(br *bufio.Reader) {
	var cause error
	for {
		line, err := readLine(br, c.opts.MaxLine)
		if err != nil {
			cause = err
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m wire
		if err := json.Unmarshal(line, &m); err != nil {
			cause = fmt.Errorf("malformed message %.200q: %w", line, err)
			break
		}
		if m.Event != "" {
			ev := Event{Name: m.Event, Data: m.Data}
			if m.Timestamp != nil {
				ev.Timestamp = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
			}
			select {
			case c.events <- ev:
			default:
				c.dropped.Add(1)
			}
			continue
		}
		var id string
		if len(m.ID) > 0 {
			if err := json.Unmarshal(m.ID, &id); err != nil {
				id = string(m.ID)
			}
		}
		c.mu.Lock()
		ch, ok := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if !ok {
			continue // a reply whose caller gave up, or one without our id
		}
		r := reply{ret: m.Return}
		if m.Error != nil {
			r.err = &Error{Class: m.Error.Class, Desc: m.Error.Desc}
		}
		ch <- r // buffered
	}
	c.conn.Close()
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	c.pending = nil
	c.mu.Unlock()
	close(c.events)
	close(c.done)
}

// Execute sends one command with optional arguments (marshalled to the
// "arguments" member) and decodes the reply's "return" into result (when
// non-nil). An error reply is an *Error.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	case <-c.done:
		return fmt.Errorf("qmp %s: %w", command, c.Err())
	}
	defer func() { <-c.sem }()

	ret, err := c.roundTrip(ctx, command, args, -1)
	if err != nil {
		return err
	}
	if result != nil && len(ret) > 0 {
		if err := json.Unmarshal(ret, result); err != nil {
			return fmt.Errorf("qmp %s: decoding reply: %w", command, err)
		}
	}
	return nil
}

// SendFD hands QEMU an open file under name (QMP getfd, the descriptor
// passed as SCM_RIGHTS with the command), e.g. for a migration to or from
// "fd:<name>" without QEMU spawning a process. The connection must be a
// Unix socket.
func (c *Client) SendFD(ctx context.Context, name string, f *os.File) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("qmp getfd: %w", context.Cause(ctx))
	case <-c.done:
		return fmt.Errorf("qmp getfd: %w", c.Err())
	}
	defer func() { <-c.sem }()
	if _, ok := c.conn.(*net.UnixConn); !ok {
		return fmt.Errorf("qmp getfd: passing a descriptor needs a Unix socket, not %T", c.conn)
	}
	_, err := c.roundTrip(ctx, "getfd", map[string]string{"fdname": name}, int(f.Fd()))
	return err
}

func (c *Client) roundTrip(ctx context.Context, command string, args any, fd int) (json.RawMessage, error) {
	id := "airlock-" + strconv.FormatUint(c.nextID.Add(1), 10)
	msg := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        string `json:"id"`
	}{command, args, id}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: encoding: %w", command, err)
	}
	b = append(b, '\n')
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	}

	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}

	// The write: bounded by the context. A write cut short leaves a partial
	// command on the wire, so the connection is closed.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.conn.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	var n int
	var werr error
	if uc, ok := c.conn.(*net.UnixConn); ok && fd >= 0 {
		n, _, werr = uc.WriteMsgUnix(b, unix.UnixRights(fd), nil)
	} else {
		n, werr = c.conn.Write(b)
	}
	interrupted := !stop()
	if werr != nil {
		forget()
		if interrupted {
			if n == 0 {
				// Nothing reached QEMU: the connection is still good.
				<-fired
				c.conn.SetWriteDeadline(time.Time{})
				return nil, fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
			}
			c.conn.Close()
			return nil, fmt.Errorf("qmp %s: %w (connection closed: write interrupted)", command, context.Cause(ctx))
		}
		return nil, fmt.Errorf("qmp %s: %w: %w", command, ErrClosed, werr)
	}
	if interrupted {
		// The write completed, but the context ended meanwhile and armed a
		// past deadline that would fail the next write: disarm it.
		<-fired
		c.conn.SetWriteDeadline(time.Time{})
	}

	select {
	case r := <-ch:
		if r.err != nil {
			r.err.Command = command
			return nil, r.err
		}
		return r.ret, nil
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	case <-c.done:
		// The reply may have raced the close.
		select {
		case r := <-ch:
			if r.err != nil {
				r.err.Command = command
				return nil, r.err
			}
			return r.ret, nil
		default:
		}
		return nil, fmt.Errorf("qmp %s: %w", command, c.Err())
	}
}
