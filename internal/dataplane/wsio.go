package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/metrics"
)

// relay copies events from one agent output stream to the socket, reading
// the next event only once the last one is written (back-pressure). It
// reports whether any event was relayed and whether the exit event was sent.
func (s *wsSession) relay(ctx context.Context, out *agentclient.OutputStream, after *uint64) (progressed, done bool, err error) {
	for {
		ev, err := out.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the agent ended the output stream without an exit event")
			}
			return progressed, false, err
		}
		var werr error
		switch ev.Type {
		case agentproto.EventStdout, agentproto.EventStderr:
			werr = s.output(ctx, ev)
		case agentproto.EventGap:
			gap := gapData(ev)
			werr = s.event(ctx, apiv1.WSEvent{Type: apiv1.EventGap, Seq: ev.Seq, GapEventData: &gap})
		case agentproto.EventExit:
			exit := exitData(ev)
			if err := s.event(ctx, apiv1.WSEvent{Type: apiv1.EventExit, Seq: ev.Seq, ExitEventData: &exit}); err != nil {
				return progressed, false, errClientGone
			}
			*after = ev.Seq
			return true, true, nil
		default:
			continue // a newer agent's event type this server does not know
		}
		if werr != nil {
			return progressed, false, errClientGone
		}
		*after = ev.Seq
		progressed = true
	}
}

// output writes a stdout or stderr event as a binary message.
func (s *wsSession) output(ctx context.Context, ev agentproto.Event) error {
	kind := apiv1.WSStdout
	if ev.Type == agentproto.EventStderr {
		kind = apiv1.WSStderr
	}
	s.buf = append(s.buf[:0], kind)
	s.buf = binary.BigEndian.AppendUint64(s.buf, ev.Seq)
	s.buf = append(s.buf, ev.Data...)
	s.d.cfg.Metrics.StreamBytes(metrics.StreamAttachWebSocket, metrics.DirectionOut, int64(len(ev.Data)))
	return s.conn.Write(ctx, websocket.MessageBinary, s.buf)
}

// stdinIdle is how long a stdin request to the agent stays open without
// new input. The agent serialises a process's stdin writers and closes
// stdin after the process exits under the same lock, so a request held
// open while the client is idle would hold back the exit event; a burst of
// messages shares one request.
const stdinIdle = 20 * time.Millisecond

// stdinLoop writes the client's stdin messages to the process, in order,
// one agent request per burst. After a failure (no stdin, the process
// exited) it answers once with an error and drops later stdin.
func (s *wsSession) stdinLoop(ctx context.Context) {
	failed := false
	for {
		var in wsInput
		select {
		case in = <-s.stdin:
		case <-ctx.Done():
			return
		}
		if failed {
			continue
		}
		var err error
		if !in.eof {
			br := &burstReader{ctx: ctx, in: s.stdin, pending: in.data, closed: make(chan struct{})}
			err = s.t.agent.Stdin(ctx, s.t.pid.String(), br, false)
			in.eof = br.finish() && err == nil
		}
		if err == nil && in.eof {
			err = s.t.agent.Stdin(ctx, s.t.pid.String(), nil, true)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failed = true
			s.requestError(ctx, "stdin", err)
		}
	}
}

// burstReader is the body of one stdin request: the messages that arrive
// until none has for stdinIdle, or until the client's eof.
type burstReader struct {
	ctx     context.Context
	in      <-chan wsInput
	pending []byte
	sawEOF  atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

func (b *burstReader) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.sawEOF.Load() {
			return 0, io.EOF
		}
		idle := time.NewTimer(stdinIdle)
		select {
		case in := <-b.in:
			idle.Stop()
			if in.eof {
				b.sawEOF.Store(true)
			}
			b.pending = in.data
		case <-idle.C:
			return 0, io.EOF
		case <-b.closed:
			idle.Stop()
			return 0, io.EOF
		case <-b.ctx.Done():
			idle.Stop()
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// finish stops the reader (the transport may read a body after its request
// returned) and reports whether the burst ended with the client's eof.
func (b *burstReader) finish() bool {
	b.once.Do(func() { close(b.closed) })
	return b.sawEOF.Load()
}
