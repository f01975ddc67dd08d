package agentclient

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agentproto"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		line    string
		ok      bool
		typ     string
		data    string
		exit    int
		signal  string
		comment string
	}{
		{line: `{"seq":1,"type":"stdout","data":"aGk="}`, ok: true, typ: "stdout", data: "hi"},
		{line: `{"seq":7,"type":"exit","exit_code":-1,"signal":"KILL"}`, ok: true, typ: "exit", exit: -1, signal: "KILL"},
		{line: `{"seq":2,"type":"pty","data":"","future":true}`, ok: true, typ: "pty", comment: "unknown types and fields pass (the protocol grows)"},
		{line: `{"seq":0,"type":"stdout"}`},
		{line: `{"type":"stdout"}`},
		{line: `{"seq":1}`},
		{line: `{"seq":1,"type":"exit"}`},
		{line: `{"seq":-1,"type":"stdout"}`},
		{line: `{"seq":1,"type":"stdout","data":"not base64!"}`},
		{line: `[]`},
		{line: `{"seq":1,"type":"stdout"`},
		{line: `null`},
	}
	for _, tt := range tests {
		ev, err := parseEvent([]byte(tt.line))
		if !tt.ok {
			if err == nil {
				t.Errorf("parseEvent(%s) = %+v, want an error", tt.line, ev)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseEvent(%s): %v", tt.line, err)
			continue
		}
		if ev.Type != tt.typ || string(ev.Data) != tt.data || ev.Signal != tt.signal || (tt.typ == "exit" && *ev.ExitCode != tt.exit) {
			t.Errorf("parseEvent(%s) = %+v", tt.line, ev)
		}
	}
}

func TestOutputStreamNext(t *testing.T) {
	tests := []struct {
		name    string
		after   uint64
		body    string
		want    []uint64 // Seqs returned before the end
		wantErr bool     // ends with an error rather than io.EOF
	}{
		{"complete", 0, "{\"seq\":1,\"type\":\"stdout\",\"data\":\"YQ==\"}\n{\"seq\":2,\"type\":\"exit\",\"exit_code\":0}\n", []uint64{1, 2}, false},
		{"gap is fine", 0, "{\"seq\":5,\"type\":\"stdout\"}\n{\"seq\":6,\"type\":\"exit\",\"exit_code\":0}\n", []uint64{5, 6}, false},
		{"blank lines ignored", 0, "\n{\"seq\":1,\"type\":\"exit\",\"exit_code\":0}\n\n", []uint64{1}, false},
		{"lines after exit ignored", 0, "{\"seq\":1,\"type\":\"exit\",\"exit_code\":0}\n{\"seq\":2,\"type\":\"stdout\"}\n", []uint64{1}, false},
		{"empty stream after exit", 9, "", nil, false},
		{"ends without exit", 0, "{\"seq\":1,\"type\":\"stdout\"}\n", []uint64{1}, false},
		{"seq goes back", 0, "{\"seq\":2,\"type\":\"stdout\"}\n{\"seq\":2,\"type\":\"stdout\"}\n", []uint64{2}, true},
		{"seq not after the resume point", 5, "{\"seq\":5,\"type\":\"stdout\"}\n", nil, true},
		{"garbage", 0, "{\"seq\":1,\"type\":\"stdout\"}\nnot json\n", []uint64{1}, true},
		{"line too long", 0, "{\"seq\":1,\"type\":\"stdout\",\"data\":\"" + strings.Repeat("A", maxEventLine) + "\"}\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newOutputStream("proc_x", tt.after, io.NopCloser(strings.NewReader(tt.body)), false)
			var got []uint64
			var err error
			for {
				var ev agentproto.Event
				ev, err = s.Next()
				if err != nil {
					break
				}
				got = append(got, ev.Seq)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("seqs %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("seqs %v, want %v", got, tt.want)
				}
			}
			if tt.wantErr == errors.Is(err, io.EOF) {
				t.Fatalf("ended with %v, wantErr=%v", err, tt.wantErr)
			}
			// The end is sticky.
			if _, err2 := s.Next(); !errors.Is(err2, io.EOF) && err2.Error() != err.Error() {
				t.Fatalf("second end %v differs from %v", err2, err)
			}
		})
	}
}

func TestErrorIs(t *testing.T) {
	exists := &Error{Status: 409, Code: agentproto.CodeExists, Message: "x"}
	notFound := &Error{Status: 404, Code: agentproto.CodeNotFound, Message: "x"}
	noRoute := &Error{Status: 404, Code: agentproto.CodeNoRoute, Message: "x"}
	if !errors.Is(exists, ErrProcessExists) || errors.Is(exists, ErrProcessNotFound) {
		t.Fatal("exists")
	}
	if !errors.Is(notFound, ErrProcessNotFound) || errors.Is(notFound, ErrProcessExists) {
		t.Fatal("not found")
	}
	if errors.Is(noRoute, ErrProcessNotFound) {
		t.Fatal("an unknown endpoint is not a missing process")
	}
	if !strings.Contains(exists.Error(), "exists") || !strings.Contains((&Error{Status: 502, Message: "bad gateway"}).Error(), "502") {
		t.Fatal("Error() text")
	}
}

func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"seq":1,"type":"stdout","data":"aGk="}`,
		`{"seq":7,"type":"exit","exit_code":-1,"signal":"KILL"}`,
		`{"seq":2,"type":"x"}`,
		`{"seq":18446744073709551615,"type":"exit","exit_code":0}`,
		`{}`, `[`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := parseEvent(line)
		if err != nil {
			return
		}
		if ev.Seq == 0 || ev.Type == "" || (ev.Type == agentproto.EventExit && ev.ExitCode == nil) {
			t.Fatalf("accepted an invalid event %+v from %q", ev, line)
		}
		// What we accept survives a round trip.
		again, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		ev2, err := parseEvent(again)
		if err != nil || ev2.Seq != ev.Seq || ev2.Type != ev.Type || string(ev2.Data) != string(ev.Data) {
			t.Fatalf("round trip of %+v: %+v, %v", ev, ev2, err)
		}
		// And a stream of it ends cleanly or with an error, never panics.
		s := newOutputStream("p", 0, io.NopCloser(strings.NewReader(string(line)+"\n"+string(line)+"\n")), false)
		for range 3 {
			if _, err := s.Next(); err != nil {
				break
			}
		}
	})
}
