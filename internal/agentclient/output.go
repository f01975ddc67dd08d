package agentclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/retry"
)

// maxEventLine bounds one NDJSON line of an output stream (protocol 1: an
// agent's event carries at most 64 KiB of output, base64 in JSON).
const maxEventLine = 1 << 20

// OutputStream reads the events of one process. It is not safe for
// concurrent use.
type OutputStream struct {
	id     string
	body   io.ReadCloser
	frames *agentproto.FrameReader // protocol 2 agents
	sc     *bufio.Scanner          // NDJSON, protocol 1 agents
	last   uint64                  // Seq of the last event returned (or the after it started from)
	done   bool
	err    error
}

func newOutputStream(id string, after uint64, body io.ReadCloser, frames bool) *OutputStream {
	s := &OutputStream{id: id, body: body, last: after}
	if frames {
		s.frames = agentproto.NewFrameReader(body)
	} else {
		s.sc = bufio.NewScanner(body)
		s.sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	}
	return s
}

// Next returns the next event. After the exit event it returns io.EOF; it
// also returns io.EOF if the agent ended the stream cleanly without one
// (the stream was opened after the exit event). Any other error means the
// stream broke: open a new one with Output(ctx, id, lastSeq) to resume.
// A gap event (agentproto.EventGap) says the agent dropped output before it
// was read; an older agent's gap shows only as a jump in Seq.
func (s *OutputStream) Next() (agentproto.Event, error) {
	if s.done {
		return agentproto.Event{}, io.EOF
	}
	if s.err != nil {
		return agentproto.Event{}, s.err
	}
	for {
		ev, err := s.read()
		if errors.Is(err, agentproto.ErrUnknownFrame) {
			continue // a newer agent's event kind
		}
		if errors.Is(err, io.EOF) {
			s.done = true
			return agentproto.Event{}, io.EOF
		}
		if err != nil {
			s.err = fmt.Errorf("agent output of %s broke after seq %d: %w", s.id, s.last, err)
			return agentproto.Event{}, s.err
		}
		if ev.Seq <= s.last {
			s.err = fmt.Errorf("agent output of %s: event seq %d after seq %d", s.id, ev.Seq, s.last)
			return agentproto.Event{}, s.err
		}
		s.last = ev.Seq
		if ev.Type == agentproto.EventExit {
			s.done = true
			s.body.Close()
		}
		return ev, nil
	}
}

// read decodes the next event in either encoding; io.EOF at a clean end.
func (s *OutputStream) read() (agentproto.Event, error) {
	if s.frames != nil {
		return s.frames.Next()
	}
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			continue
		}
		return parseEvent(line)
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return agentproto.Event{}, fmt.Errorf("%w: an output event line is over %d bytes", ErrResponseTooLarge, maxEventLine)
		}
		return agentproto.Event{}, err
	}
	return agentproto.Event{}, io.EOF
}

// Close ends the stream.
func (s *OutputStream) Close() error {
	return s.body.Close()
}

// parseEvent decodes one NDJSON line of an output stream. Unknown fields and
// event types are accepted (the protocol grows); what every event needs is
// checked.
func parseEvent(line []byte) (agentproto.Event, error) {
	var ev agentproto.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return agentproto.Event{}, fmt.Errorf("bad event line: %w", err)
	}
	if ev.Seq == 0 {
		return agentproto.Event{}, errors.New("bad event: seq missing or 0")
	}
	switch ev.Type {
	case "":
		return agentproto.Event{}, fmt.Errorf("bad event %d: type missing", ev.Seq)
	case agentproto.EventExit:
		if ev.ExitCode == nil {
			return agentproto.Event{}, fmt.Errorf("bad exit event %d: exit_code missing", ev.Seq)
		}
	}
	return ev, nil
}

// RunResult is the outcome of Run.
type RunResult struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int    // -1 if killed by a signal
	Signal   string // the signal that killed it, e.g. "KILL"
}

// maxResumes is how many times in a row Run reopens a broken output
// stream without receiving an event in between.
const maxResumes = 5

// Run starts a process and collects its output until it exits, resuming the
// output stream if the connection breaks. If the agent dropped output
// before Run read it, Run returns what it has together with an error
// matching ErrOutputLost.
func (c *Client) Run(ctx context.Context, req agentproto.StartRequest) (RunResult, error) {
	if _, err := c.Start(ctx, req); err != nil {
		return RunResult{}, err
	}
	var (
		res    RunResult
		last   uint64
		lost   uint64
		broken int
		wait   = resumeBackoff().Start(nil)
	)
	for {
		s, err := c.Output(ctx, req.ID, last)
		if err != nil {
			var ae *Error
			if ctx.Err() != nil || errors.As(err, &ae) || broken >= maxResumes {
				return res, fmt.Errorf("run %s: %w", req.ID, err)
			}
			broken++
			if err := wait.Wait(ctx); err != nil {
				return res, fmt.Errorf("run %s: %w", req.ID, err)
			}
			continue
		}
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				s.Close()
				return res, fmt.Errorf("run %s: output ended without an exit event", req.ID)
			}
			if err != nil {
				s.Close()
				c.logger.Debug("agent output stream broke; resuming", "id", req.ID, "after", last, "err", err)
				break
			}
			broken = 0
			wait.Reset()
			if ev.Seq != last+1 && ev.Type != agentproto.EventGap {
				lost += ev.Seq - last - 1 // an older agent's silent gap
			}
			last = ev.Seq
			switch ev.Type {
			case agentproto.EventGap:
				lost += ev.Gap.Events
			case agentproto.EventStdout, agentproto.EventStderr:
				if len(res.Stdout)+len(res.Stderr)+len(ev.Data) > maxRunOutput {
					s.Close()
					return res, fmt.Errorf("run %s: %w: output is over %d bytes (read it with Output instead)", req.ID, ErrResponseTooLarge, maxRunOutput)
				}
				if ev.Type == agentproto.EventStdout {
					res.Stdout = append(res.Stdout, ev.Data...)
				} else {
					res.Stderr = append(res.Stderr, ev.Data...)
				}
			case agentproto.EventExit:
				s.Close()
				res.ExitCode, res.Signal = *ev.ExitCode, ev.Signal
				if lost > 0 {
					return res, fmt.Errorf("run %s: %w: %d events dropped by the agent before they were read", req.ID, ErrOutputLost, lost)
				}
				return res, nil
			}
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("run %s: %w", req.ID, ctx.Err())
		}
		broken++
		if broken > maxResumes {
			return res, fmt.Errorf("run %s: output stream kept breaking", req.ID)
		}
	}
}

// resumeBackoff is how long Run waits before it reopens an output stream
// that failed to open: from 50 ms, doubling, at most 250 ms (±20%).
func resumeBackoff() retry.Policy {
	return retry.Policy{Initial: 50 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.2}
}
