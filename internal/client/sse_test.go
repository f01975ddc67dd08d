package client

import (
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func decodeAll(t *testing.T, r io.Reader) ([]SSEEvent, string, error) {
	t.Helper()
	d := NewSSEDecoder(r)
	var evs []SSEEvent
	for {
		ev, err := d.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return evs, d.LastEventID(), nil
			}
			return evs, d.LastEventID(), err
		}
		evs = append(evs, ev)
	}
}

func TestSSEDecoder(t *testing.T) {
	msg := func(typ, data, id string, hasID bool) SSEEvent {
		return SSEEvent{Type: typ, Data: data, ID: id, HasID: hasID}
	}
	tests := []struct {
		name   string
		in     string
		want   []SSEEvent
		lastID string
	}{
		{"empty", "", nil, ""},
		{"one event", "event: stdout\ndata: {}\nid: 1\n\n",
			[]SSEEvent{msg("stdout", "{}", "1", true)}, "1"},
		{"default type", "data: x\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"multi-line data", "data: a\ndata: b\ndata:\n\n", []SSEEvent{msg("message", "a\nb\n", "", false)}, ""},
		{"only one leading space removed", "data:  two\n\n", []SSEEvent{msg("message", " two", "", false)}, ""},
		{"no space", "data:x\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"colon in value", "data: a:b: c\n\n", []SSEEvent{msg("message", "a:b: c", "", false)}, ""},
		{"field without colon", "data\n\n", []SSEEvent{msg("message", "", "", false)}, ""},
		{"comments ignored", ": hello\n:\ndata: x\n: mid\n\n: keep-alive\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"CRLF", "event: e\r\ndata: x\r\nid: 7\r\n\r\n", []SSEEvent{msg("e", "x", "7", true)}, "7"},
		{"CR only", "event: e\rdata: x\rdata: y\r\r", []SSEEvent{msg("e", "x\ny", "", false)}, ""},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []SSEEvent{msg("message", "a\nb\nc", "", false)}, ""},
		{"BOM skipped", "\xEF\xBB\xBFdata: x\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"second BOM kept", "\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n", nil, ""},
		{"unfinished event discarded", "data: x\n\ndata: y\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"unfinished line discarded", "data: x\n\ndata: y", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"id persists", "id: 5\ndata: a\n\ndata: b\n\n",
			[]SSEEvent{msg("message", "a", "5", true), msg("message", "b", "5", false)}, "5"},
		{"empty id resets", "id: 5\ndata: a\n\nid\ndata: b\n\n",
			[]SSEEvent{msg("message", "a", "5", true), msg("message", "b", "", true)}, ""},
		{"id with NUL ignored", "id: 5\ndata: a\n\nid: 6\x007\ndata: b\n\n",
			[]SSEEvent{msg("message", "a", "5", true), msg("message", "b", "5", false)}, "5"},
		{"id without data updates last id", "id: 9\n\n", nil, "9"},
		{"id of unfinished event does not count", "id: 1\ndata: a\n\nid: 2\ndata: b\n",
			[]SSEEvent{msg("message", "a", "1", true)}, "1"},
		{"event without data not dispatched, type reset", "event: exit\n\ndata: x\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"unknown fields ignored", "foo: bar\ndata: x\nDATA: y\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"retry ignored in events", "retry: 1500\ndata: x\n\n", []SSEEvent{msg("message", "x", "", false)}, ""},
		{"last event type wins", "event: a\nevent: b\ndata: x\n\n", []SSEEvent{msg("b", "x", "", false)}, ""},
		{"blank lines between events", "\n\n\ndata: x\n\n\n\ndata: y\n\n",
			[]SSEEvent{msg("message", "x", "", false), msg("message", "y", "", false)}, ""},
		{"binary-ish bytes passed through", "data: \xff\xfe\n\n", []SSEEvent{msg("message", "\xff\xfe", "", false)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []struct {
				name string
				r    io.Reader
			}{
				{"whole", strings.NewReader(tt.in)},
				{"byte by byte", iotest.OneByteReader(strings.NewReader(tt.in))},
			} {
				got, lastID, err := decodeAll(t, r.r)
				if err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: events = %#v, want %#v", r.name, got, tt.want)
				}
				if lastID != tt.lastID {
					t.Errorf("%s: last id = %q, want %q", r.name, lastID, tt.lastID)
				}
			}
		})
	}
}

func TestSSEDecoderRetry(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"retry: 1500\n\n", 1500 * time.Millisecond},
		{"retry: 15x\n\n", 0},
		{"retry: -1\n\n", 0},
		{"retry:\n\n", 0},
		{"retry: 99999999999999999999\n\n", 0},
		{"retry: 10\nretry: oops\n\n", 10 * time.Millisecond},
	} {
		d := NewSSEDecoder(strings.NewReader(tt.in))
		if _, err := d.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%q: Next = %v, want EOF", tt.in, err)
		}
		if d.Retry() != tt.want {
			t.Errorf("%q: retry = %v, want %v", tt.in, d.Retry(), tt.want)
		}
	}
}

// A CR at the end of what has arrived so far must not hold back the event
// it completes: the decoder may not wait to see whether an LF follows.
func TestSSEDecoderCRDoesNotBlock(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	d := NewSSEDecoder(pr)
	got := make(chan SSEEvent, 1)
	go func() {
		ev, err := d.Next()
		if err == nil {
			got <- ev
		}
		close(got)
	}()
	if _, err := pw.Write([]byte("data: x\r\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-got:
		if !ok || ev.Data != "x" {
			t.Fatalf("got %#v, %v", ev, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("event terminated by CR CR was not dispatched")
	}
	// The LF of a later CRLF is still swallowed correctly.
	go func() { _, _ = pw.Write([]byte("\ndata: y\r\n\r\n")) }()
	ev, err := d.Next()
	if err != nil || ev.Data != "y" {
		t.Fatalf("second event = %#v, %v", ev, err)
	}
}

func TestSSEDecoderLimits(t *testing.T) {
	if d := NewSSEDecoder(strings.NewReader("")); d.maxLine != maxSSELine || d.maxData != maxSSEData {
		t.Fatalf("limits %d/%d, want %d/%d", d.maxLine, d.maxData, maxSSELine, maxSSEData)
	}
	next := func(in string) error {
		d := NewSSEDecoder(iotest.HalfReader(strings.NewReader(in)))
		d.maxLine, d.maxData = 100, 250
		for {
			if _, err := d.Next(); err != nil {
				return err
			}
		}
	}
	fits := "data: " + strings.Repeat("a", 94) + "\n"
	if err := next(fits + fits + "\n"); !errors.Is(err, io.EOF) {
		t.Errorf("within limits: %v", err)
	}
	if err := next("data: " + strings.Repeat("a", 95) + "\n\n"); !errors.Is(err, ErrSSETooLarge) {
		t.Errorf("long line: err = %v, want ErrSSETooLarge", err)
	}
	if err := next(": " + strings.Repeat("a", 5000)); !errors.Is(err, ErrSSETooLarge) {
		t.Errorf("long unterminated comment: err = %v, want ErrSSETooLarge", err)
	}
	if err := next(fits + fits + fits + "\n"); !errors.Is(err, ErrSSETooLarge) {
		t.Errorf("large event: err = %v, want ErrSSETooLarge", err)
	}
}

func TestSSEDecoderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: x\n\ndata: y\n"), iotest.ErrReader(boom))
	evs, _, err := decodeAll(t, r)
	if len(evs) != 1 || !errors.Is(err, boom) {
		t.Fatalf("events %v, err %v; want one event then boom", evs, err)
	}
}

// referenceSSE is a direct transcription of the WHATWG algorithm over a
// complete input, used to check the streaming decoder.
func referenceSSE(in string) ([]SSEEvent, string) {
	in = strings.TrimPrefix(in, "\xEF\xBB\xBF")
	var lines []string
	start := 0
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '\n':
			lines = append(lines, in[start:i])
			start = i + 1
		case '\r':
			lines = append(lines, in[start:i])
			if i+1 < len(in) && in[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	// in[start:] is an unfinished line: discarded.
	var evs []SSEEvent
	var data strings.Builder
	typ, idBuf, lastID := "", "", ""
	hasData, hasID := false, false
	for _, l := range lines {
		if l == "" {
			lastID = idBuf
			if hasData {
				t := typ
				if t == "" {
					t = "message"
				}
				d := data.String()
				evs = append(evs, SSEEvent{Type: t, Data: d[:len(d)-1], ID: lastID, HasID: hasID})
			}
			data.Reset()
			typ, hasData, hasID = "", false, false
			continue
		}
		if l[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(l, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "event":
			typ = value
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
			hasData = true
		case "id":
			if !strings.Contains(value, "\x00") {
				idBuf, hasID = value, true
			}
		}
	}
	return evs, lastID
}

// chunkReader hands out its input in the chunk sizes given by sizes.
type chunkReader struct {
	data  []byte
	sizes []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[0])%7 + 1
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func FuzzSSEDecoder(f *testing.F) {
	seeds := []string{
		"event: stdout\ndata: {\"data\":\"aGk=\"}\nid: 1\n\n",
		"data: a\r\ndata: b\r\r\n: c\rid: 3\n\n",
		"\xEF\xBB\xBFid: 1\x00\ndata\n\nretry: 10\nevent:exit\ndata:{}\n\n",
		"data: x\n\ndata: unfinished",
		"id: 5\n\nid\ndata: y\n\n",
	}
	for i, s := range seeds {
		f.Add([]byte(s), []byte(strconv.Itoa(i*7919)))
	}
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		want, wantID := referenceSSE(string(in))
		got, gotID, err := decodeAll(t, &chunkReader{data: in, sizes: sizes})
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("input %q:\n got %#v\nwant %#v", in, got, want)
		}
		if gotID != wantID {
			t.Fatalf("input %q: last id %q, want %q", in, gotID, wantID)
		}
	})
}
