package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
)

func intp(i int) *int { return &i }

func TestFrameRoundTrip(t *testing.T) {
	events := []Event{
		{Seq: 1, Type: EventStdout, Data: []byte("hello\n")},
		{Seq: 2, Type: EventStderr, Data: []byte{0, 1, 2, 0xff}},
		{Seq: 3, Type: EventStdout, Data: []byte{}},
		{Seq: 9, Type: EventGap, Gap: &Gap{Events: 5, StdoutBytes: 100, StderrBytes: 3, Exact: true}},
		{Seq: 10, Type: EventExit, ExitCode: intp(-1), Signal: "KILL", TimedOut: true},
	}
	var buf []byte
	for i := range events {
		var err error
		if buf, err = AppendFrame(buf, &events[i]); err != nil {
			t.Fatal(err)
		}
	}
	r := NewFrameReader(bytes.NewReader(buf))
	for i, want := range events {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want.Data != nil && len(want.Data) == 0 {
			want.Data = got.Data // empty and nil are the same on the wire
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d = %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFrameErrors(t *testing.T) {
	good, _ := AppendFrame(nil, &Event{Seq: 1, Type: EventStdout, Data: []byte("abc")})
	unknown := append([]byte{99}, good[1:]...)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated header", good[:5], io.ErrUnexpectedEOF},
		{"truncated payload", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"unknown kind", unknown, ErrUnknownFrame},
		{"seq 0", append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0), nil},
		{"huge", []byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}, nil},
		{"bad exit", append([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, '{'), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFrameReader(bytes.NewReader(tt.in)).Next()
			if err == nil || err == io.EOF {
				t.Fatalf("Next = %v, want an error", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Next = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := AppendFrame(nil, &Event{Seq: 1, Type: EventExit}); err == nil {
		t.Fatal("exit without code encoded")
	}
	if _, err := AppendFrame(nil, &Event{Seq: 1, Type: "bogus"}); err == nil {
		t.Fatal("unknown type encoded")
	}
}

func FuzzFrameReader(f *testing.F) {
	good, _ := AppendFrame(nil, &Event{Seq: 7, Type: EventStdout, Data: []byte("x")})
	good, _ = AppendFrame(good, &Event{Seq: 8, Type: EventExit, ExitCode: intp(3)})
	f.Add(good)
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewFrameReader(bytes.NewReader(data))
		for range 64 {
			ev, err := r.Next()
			if err != nil {
				if errors.Is(err, ErrUnknownFrame) {
					continue
				}
				return
			}
			// Whatever decodes must encode and decode to the same event.
			b, err := AppendFrame(nil, &ev)
			if err != nil {
				t.Fatalf("re-encode %+v: %v", ev, err)
			}
			ev2, err := NewFrameReader(bytes.NewReader(b)).Next()
			if err != nil || !reflect.DeepEqual(ev, ev2) {
				t.Fatalf("round trip %+v → %+v, %v", ev, ev2, err)
			}
		}
	})
}

// A header that claims a big payload does not make the reader allocate
// it: the peer is untrusted and may send nothing more.
func TestFrameReaderAllocatesWhatArrives(t *testing.T) {
	hdr := make([]byte, frameHeaderLen)
	hdr[0] = frameStdout
	binary.BigEndian.PutUint64(hdr[1:9], 1)
	binary.BigEndian.PutUint32(hdr[9:13], MaxFramePayload)
	stream := append(hdr, bytes.Repeat([]byte("x"), 100<<10)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := NewFrameReader(bytes.NewReader(stream)).Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Next = %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("reading a truncated frame that claims %d bytes allocated %d bytes", MaxFramePayload, got)
	}
	// Control frames (exit, gap) are small JSON.
	hdr[0] = frameExit
	binary.BigEndian.PutUint32(hdr[9:13], maxControlPayload+1)
	if _, err := NewFrameReader(bytes.NewReader(append(hdr, make([]byte, maxControlPayload+1)...))).Next(); err == nil {
		t.Fatal("an exit frame over the control payload cap was accepted")
	}
}
