package dataplane

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
)

// maxResumes is how many times in a row a stream reopens the agent's output
// without receiving an event in between; every event received resets it.
const maxResumes = 5

// queueBytes bounds the output bytes an SSE attachment's relay queue
// holds between the agent's stream and the client (at least one event is
// always let through, whatever its size). With the agent's 64 KiB events
// and its 1 MiB HTTP/2 window, an attachment that reads nothing holds
// about 1.3 MiB (docs/security.md, "Connection budgets").
const queueBytes = 128 << 10

// flushEvery bounds the bytes written to a client between flushes while
// events keep coming (output is flushed at once when the relay catches up).
const flushEvery = 256 << 10

// stream relays the process's events from the agent to an SSE client until
// the exit event; see follow.
func (d *DataPlane) stream(ctx context.Context, sse *sseWriter, agent *agentclient.Client, pid model.ProcessID, after uint64) error {
	return d.follow(ctx, agent, pid, &after, func(ctx context.Context, out *agentclient.OutputStream, after *uint64) (bool, bool, error) {
		return d.relay(ctx, sse, out, after)
	})
}

// relayFunc copies events of one agent output stream to a client, advancing
// *after; it reports whether it relayed any event and whether it sent the
// exit event.
type relayFunc func(ctx context.Context, out *agentclient.OutputStream, after *uint64) (progressed, done bool, err error)

// follow relays the process's events with relay until the exit event,
// reopening the agent's output stream after the last relayed sequence
// number if it breaks. It returns nil once the exit event was sent.
func (d *DataPlane) follow(ctx context.Context, agent *agentclient.Client, pid model.ProcessID, after *uint64, relay relayFunc) error {
	resumes := 0
	wait := resumeBackoff().Start(nil)
	for {
		out, err := agent.Output(ctx, pid.String(), *after)
		if err != nil {
			var aerr *agentclient.Error
			if errors.As(err, &aerr) || resumes >= maxResumes || ctx.Err() != nil {
				return err
			}
			resumes++
			_ = wait.Wait(ctx) // ctx's end is seen by the next Output
			continue
		}
		progressed, done, err := relay(ctx, out, after)
		_ = out.Close()
		switch {
		case done:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errClientGone):
			return err
		}
		if progressed {
			resumes = 0 // a healthy stretch: the budget starts again
			wait.Reset()
		}
		if resumes >= maxResumes {
			return err
		}
		resumes++
		d.log.DebugContext(ctx, "agent output stream broke; resuming", "process", pid, "after", *after, "err", err)
	}
}

// errClientGone: writing to the client failed.
var errClientGone = errors.New("the client went away")

// relay copies events from one agent output stream to the client. It reports
// whether any event was relayed and whether the exit event was sent.
func (d *DataPlane) relay(ctx context.Context, sse *sseWriter, out *agentclient.OutputStream, after *uint64) (progressed, done bool, err error) {
	type next struct {
		ev  agentproto.Event
		err error
	}
	// A small queue decouples reading the agent from writing the client,
	// so writes batch; it is bounded in events and in bytes (queueBytes),
	// so a slow client stops the reader (and through flow control, the
	// process) and an unread attachment holds little besides its HTTP/2
	// window.
	events := make(chan next, 16)
	var queued atomic.Int64        // output bytes in events
	room := make(chan struct{}, 1) // the writer took an event
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			ev, err := out.Next()
			n := int64(len(ev.Data))
			for queued.Load() > 0 && queued.Load()+n > queueBytes {
				select {
				case <-room:
				case <-stop:
					return
				}
			}
			queued.Add(n)
			select {
			case events <- next{ev, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keepAlive := time.NewTicker(d.cfg.KeepAlive)
	defer keepAlive.Stop()
	unflushed := 0
	for {
		var n next
		select {
		case <-ctx.Done():
			_ = out.Close() // unblocks the reader goroutine
			return progressed, false, ctx.Err()
		case <-keepAlive.C:
			if err := sse.Comment("keep-alive"); err != nil {
				_ = out.Close()
				return progressed, false, errClientGone
			}
			continue
		case n = <-events:
			queued.Add(-int64(len(n.ev.Data)))
			select {
			case room <- struct{}{}:
			default:
			}
		}
		if n.err != nil {
			if unflushed > 0 {
				if err := sse.Flush(); err != nil {
					return progressed, false, errClientGone
				}
			}
			if errors.Is(n.err, io.EOF) {
				return progressed, false, errors.New("the agent ended the output stream without an exit event")
			}
			return progressed, false, n.err
		}
		ev := n.ev
		id := strconv.FormatUint(ev.Seq, 10)
		var werr error
		switch ev.Type {
		case agentproto.EventStdout, agentproto.EventStderr:
			werr = sse.output(ev.Seq, ev.Type, ev.Data)
			unflushed += len(ev.Data)
			d.cfg.Metrics.StreamBytes(metrics.StreamAttachSSE, metrics.DirectionOut, int64(len(ev.Data)))
		case agentproto.EventGap:
			werr = sse.Event(id, apiv1.EventGap, gapData(ev))
			unflushed++
		case agentproto.EventExit:
			werr = sse.Event(id, apiv1.EventExit, exitData(ev))
			if werr == nil {
				werr = sse.Flush()
			}
			if werr != nil {
				return progressed, false, errClientGone
			}
			*after = ev.Seq
			return true, true, nil
		default:
			continue // a newer agent's event type this server does not know
		}
		if werr == nil && (len(events) == 0 || unflushed >= flushEvery) {
			werr = sse.Flush()
			unflushed = 0
		}
		if werr != nil {
			_ = out.Close()
			return progressed, false, errClientGone
		}
		*after = ev.Seq
		progressed = true
	}
}

// resumeBackoff is how long follow waits before it reopens an agent output
// stream that failed to open: from 100 ms, doubling, at most 500 ms (±20%).
func resumeBackoff() retry.Policy {
	return retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.2}
}

// gapData is a gap event as the API shows it (SSE and WebSocket alike).
func gapData(ev agentproto.Event) apiv1.GapEventData {
	return apiv1.GapEventData{Events: ev.Gap.Events, StdoutBytes: ev.Gap.StdoutBytes, StderrBytes: ev.Gap.StderrBytes, Exact: ev.Gap.Exact}
}

// exitData is an exit event as the API shows it; an exit without a code
// (killed by a signal) has code -1.
func exitData(ev agentproto.Event) apiv1.ExitEventData {
	code := -1
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return apiv1.ExitEventData{ExitCode: code, Signal: ev.Signal, TimedOut: ev.TimedOut}
}
