package agentproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// FramesMediaType is the media type of a binary output stream. A host that
// sends it in Accept gets frames; otherwise an agent answers with NDJSON.
const FramesMediaType = "application/vnd.airlock.frames"

// Frame layout: a 13-byte header, then the payload.
//
//	byte 0      kind (frameStdout, frameStderr, frameExit, frameGap)
//	bytes 1–8   Seq, big-endian
//	bytes 9–12  payload length, big-endian (at most MaxFramePayload)
//	payload     stdout/stderr: the raw bytes; exit: JSON of exitPayload;
//	            gap: JSON of Gap. Unknown kinds carry an opaque payload
//	            that readers skip (the protocol grows).
const frameHeaderLen = 13

// MaxFramePayload bounds one frame's payload.
const MaxFramePayload = 16 << 20

const (
	frameStdout byte = 1
	frameStderr byte = 2
	frameExit   byte = 3
	frameGap    byte = 4
)

type exitPayload struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// ErrUnknownFrame is returned by FrameReader.Next for a frame of a kind this
// code does not know; the frame has been consumed and reading can go on.
var ErrUnknownFrame = errors.New("unknown frame kind")

// AppendFrame appends ev encoded as one frame to buf.
func AppendFrame(buf []byte, ev *Event) ([]byte, error) {
	var kind byte
	var payload []byte
	switch ev.Type {
	case EventStdout:
		kind, payload = frameStdout, ev.Data
	case EventStderr:
		kind, payload = frameStderr, ev.Data
	case EventExit:
		if ev.ExitCode == nil {
			return buf, errors.New("frame: exit event without exit code")
		}
		b, err := json.Marshal(exitPayload{ExitCode: *ev.ExitCode, Signal: ev.Signal, TimedOut: ev.TimedOut})
		if err != nil {
			return buf, err
		}
		kind, payload = frameExit, b
	case EventGap:
		if ev.Gap == nil {
			return buf, errors.New("frame: gap event without gap")
		}
		b, err := json.Marshal(ev.Gap)
		if err != nil {
			return buf, err
		}
		kind, payload = frameGap, b
	default:
		return buf, fmt.Errorf("frame: unknown event type %q", ev.Type)
	}
	if len(payload) > MaxFramePayload {
		return buf, fmt.Errorf("frame: payload of %d bytes is over %d", len(payload), MaxFramePayload)
	}
	var h [frameHeaderLen]byte
	h[0] = kind
	binary.BigEndian.PutUint64(h[1:9], ev.Seq)
	binary.BigEndian.PutUint32(h[9:13], uint32(len(payload)))
	buf = append(buf, h[:]...)
	return append(buf, payload...), nil
}

// FrameReader decodes a stream of frames.
type FrameReader struct {
	r   *bufio.Reader
	hdr [frameHeaderLen]byte
}

// NewFrameReader returns a reader of the frames in r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event. It returns io.EOF at a clean end between
// frames, io.ErrUnexpectedEOF inside a frame, ErrUnknownFrame (wrapped) for a
// frame it skipped, and other errors for malformed frames. The Data of
// stdout/stderr events is freshly allocated.
func (f *FrameReader) Next() (Event, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("frame header: %w", err)
	}
	kind := f.hdr[0]
	seq := binary.BigEndian.Uint64(f.hdr[1:9])
	n := binary.BigEndian.Uint32(f.hdr[9:13])
	if n > MaxFramePayload {
		return Event{}, fmt.Errorf("frame %d: payload of %d bytes is over %d", seq, n, MaxFramePayload)
	}
	if seq == 0 {
		return Event{}, errors.New("frame: seq 0")
	}
	switch kind {
	case frameStdout, frameStderr:
	case frameExit, frameGap:
		if n > maxControlPayload {
			return Event{}, fmt.Errorf("frame %d: control payload of %d bytes is over %d", seq, n, maxControlPayload)
		}
	default:
		// A newer peer's kind: skipped without keeping its payload.
		if _, err := io.CopyN(io.Discard, f.r, int64(n)); err != nil {
			return Event{}, fmt.Errorf("frame %d payload: %w", seq, unexpectedEOF(err))
		}
		return Event{Seq: seq}, fmt.Errorf("frame %d: kind %d: %w", seq, kind, ErrUnknownFrame)
	}
	payload, err := readPayload(f.r, n)
	if err != nil {
		return Event{}, fmt.Errorf("frame %d payload: %w", seq, err)
	}
	ev := Event{Seq: seq}
	switch kind {
	case frameStdout:
		ev.Type, ev.Data = EventStdout, payload
	case frameStderr:
		ev.Type, ev.Data = EventStderr, payload
	case frameExit:
		var p exitPayload
		if err := json.Unmarshal(payload, &p); err != nil {
			return Event{}, fmt.Errorf("exit frame %d: %w", seq, err)
		}
		code := p.ExitCode
		ev.Type, ev.ExitCode, ev.Signal, ev.TimedOut = EventExit, &code, p.Signal, p.TimedOut
	case frameGap:
		var g Gap
		if err := json.Unmarshal(payload, &g); err != nil {
			return Event{}, fmt.Errorf("gap frame %d: %w", seq, err)
		}
		ev.Type, ev.Gap = EventGap, &g
	}
	return ev, nil
}

// maxControlPayload bounds the JSON payload of an exit or gap frame.
const maxControlPayload = 64 << 10

// payloadStep is how much of a payload is allocated before its bytes have
// arrived: a header alone (the peer is untrusted) must not make the reader
// allocate the length it claims.
const payloadStep = 64 << 10

// readPayload reads n bytes, allocating as they arrive beyond payloadStep.
func readPayload(r io.Reader, n uint32) ([]byte, error) {
	if n <= payloadStep {
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil, unexpectedEOF(err)
		}
		return payload, nil
	}
	var b bytes.Buffer
	b.Grow(payloadStep)
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		return nil, unexpectedEOF(err)
	}
	return b.Bytes(), nil
}

// unexpectedEOF: inside a frame, the end of the stream is unexpected.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
