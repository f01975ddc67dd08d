package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Limits of the SSE decoder. Output events carry base64 chunks of tens of
// KiB; anything near these limits is a broken or hostile stream.
const (
	maxSSELine = 8 << 20  // one line
	maxSSEData = 16 << 20 // the data of one event
)

// ErrSSETooLarge is returned when a line or an event's data exceeds the
// decoder's limits.
var ErrSSETooLarge = errors.New("sse: line or event data too large")

// SSEEvent is one event dispatched by an SSEDecoder.
type SSEEvent struct {
	Type  string // the event field; "message" when the event had none
	Data  string // the data lines joined with "\n"
	ID    string // the stream's last event ID once this event was dispatched
	HasID bool   // whether this event itself carried an id field
}

// SSEDecoder reads Server-Sent Events from a byte stream following the
// WHATWG HTML "event stream interpretation": lines end in CRLF, LF or CR; a
// leading UTF-8 BOM is skipped; lines starting with ':' are comments; a field
// value loses one leading space; data lines are joined with "\n"; the id
// persists across events and an id containing NUL is ignored; an event with
// no data field is not dispatched; an unfinished event at the end of the
// stream is discarded. Bytes are passed through as they are (no UTF-8
// replacement): Airlock's events carry JSON, whose decoder deals with that.
type SSEDecoder struct {
	r       *bufio.Reader
	line    []byte
	skipLF  bool // the previous line ended in CR; a following LF belongs to it
	started bool // the BOM check is done
	idBuf   string
	lastID  string
	retry   time.Duration
	data    []byte
	maxLine int // maxSSELine; smaller in tests
	maxData int // maxSSEData; smaller in tests
}

// NewSSEDecoder returns a decoder reading from r.
func NewSSEDecoder(r io.Reader) *SSEDecoder {
	return &SSEDecoder{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxSSELine, maxData: maxSSEData}
}

// newSSEDecoderAfter returns a decoder whose last event ID starts at lastID,
// as on a reconnected stream.
func newSSEDecoderAfter(r io.Reader, lastID string) *SSEDecoder {
	d := NewSSEDecoder(r)
	d.idBuf, d.lastID = lastID, lastID
	return d
}

// LastEventID returns the last event ID of the stream, i.e. what a client
// sends as Last-Event-ID when it reconnects.
func (d *SSEDecoder) LastEventID() string { return d.lastID }

// Retry returns the reconnection time most recently set by a retry field, or
// zero if none was.
func (d *SSEDecoder) Retry() time.Duration { return d.retry }

// Next returns the next event. At the end of the stream it returns io.EOF
// (an unfinished event is discarded); a read error is returned as is.
func (d *SSEDecoder) Next() (SSEEvent, error) {
	d.data = d.data[:0]
	hasData, hasID := false, false
	typ := ""
	for {
		line, err := d.readLine()
		if err != nil {
			return SSEEvent{}, err
		}
		if len(line) == 0 { // dispatch
			d.lastID = d.idBuf
			if !hasData {
				typ, hasID = "", false
				continue
			}
			if typ == "" {
				typ = "message"
			}
			data := d.data[:len(d.data)-1] // drop the last "\n"
			return SSEEvent{Type: typ, Data: string(data), ID: d.lastID, HasID: hasID}, nil
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			typ = string(value)
		case "data":
			if len(d.data)+len(value)+1 > d.maxData {
				return SSEEvent{}, fmt.Errorf("%w: event data over %d bytes", ErrSSETooLarge, d.maxData)
			}
			d.data = append(d.data, value...)
			d.data = append(d.data, '\n')
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				d.idBuf = string(value)
				hasID = true
			}
		case "retry":
			if ms, ok := parseDigits(value); ok {
				d.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// parseDigits parses a non-empty string of ASCII digits that fits the retry
// range (at most about 24 days in milliseconds).
func parseDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n > int64(time.Duration(1<<62)/time.Millisecond) {
		return 0, false
	}
	return n, true
}

// readLine returns the next line without its terminator. The returned slice
// is valid until the next call. A line cut short by the end of the stream is
// discarded and io.EOF returned.
func (d *SSEDecoder) readLine() ([]byte, error) {
	if !d.started {
		d.started = true
		if b, err := d.r.Peek(1); err == nil && b[0] == 0xEF {
			if b, err := d.r.Peek(3); err == nil && b[1] == 0xBB && b[2] == 0xBF {
				_, _ = d.r.Discard(3)
			}
		}
	}
	if d.skipLF {
		b, err := d.r.Peek(1)
		if err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			_, _ = d.r.Discard(1)
		}
		d.skipLF = false
	}
	d.line = d.line[:0]
	for {
		if _, err := d.r.Peek(1); err != nil {
			return nil, err
		}
		buf, _ := d.r.Peek(d.r.Buffered())
		if i := lineEnd(buf); i >= 0 {
			if len(d.line)+i > d.maxLine {
				return nil, fmt.Errorf("%w: line over %d bytes", ErrSSETooLarge, d.maxLine)
			}
			d.line = append(d.line, buf[:i]...)
			d.skipLF = buf[i] == '\r'
			_, _ = d.r.Discard(i + 1)
			return d.line, nil
		}
		if len(d.line)+len(buf) > d.maxLine {
			return nil, fmt.Errorf("%w: line over %d bytes", ErrSSETooLarge, d.maxLine)
		}
		d.line = append(d.line, buf...)
		_, _ = d.r.Discard(len(buf))
	}
}

// lineEnd returns the index of the first '\r' or '\n' in b, or -1. Two
// IndexByte scans (vectorised) beat one IndexAny over long data lines.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}
