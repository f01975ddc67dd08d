package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func TestDecodeOutputData(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, 'a'}, 10000)
	for _, tc := range []struct {
		name   string
		in     string
		want   []byte
		wantOK bool
	}{
		{name: "data plane form", in: `{"data":"aGVsbG8K"}`, want: []byte("hello\n"), wantOK: true},
		{name: "binary", in: `{"data":"` + base64.StdEncoding.EncodeToString(big) + `"}`, want: big, wantOK: true},
		{name: "empty", in: `{"data":""}`, want: []byte{}, wantOK: true},
		{name: "spaces: JSON decodes it", in: `{ "data": "aGVsbG8K" }`},
		{name: "escaped slash: JSON decodes it", in: `{"data":"a\/8="}`},
		{name: "other fields", in: `{"data":"aGk=","x":1}`},
		{name: "bad base64", in: `{"data":"!!!!"}`},
		{name: "null", in: `{"data":null}`},
		{name: "not an object", in: `"aGk="`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decodeOutputData(tc.in)
			if ok != tc.wantOK || !bytes.Equal(got, tc.want) {
				t.Fatalf("decodeOutputData(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
			// Whatever the fast path decodes, encoding/json decodes alike.
			var d apiv1.OutputEventData
			if ok {
				if err := json.Unmarshal([]byte(tc.in), &d); err != nil || !bytes.Equal(d.Data, got) {
					t.Fatalf("encoding/json gives %q, %v", d.Data, err)
				}
			}
		})
	}
}

func TestDecodeEventFallsBackToJSON(t *testing.T) {
	ev, ok, err := decodeEvent(SSEEvent{Type: apiv1.EventStdout, Data: `{ "data": "aGk=" }`})
	if err != nil || !ok || string(ev.Data) != "hi" {
		t.Fatalf("decodeEvent = %+v, %v, %v", ev, ok, err)
	}
	if _, _, err := decodeEvent(SSEEvent{Type: apiv1.EventStdout, Data: `{"data":"!!!!"}`}); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

func BenchmarkDecodeOutputEvent(b *testing.B) {
	data := `{"data":"` + base64.StdEncoding.EncodeToString(make([]byte, 32<<10)) + `"}`
	b.SetBytes(32 << 10)
	for b.Loop() {
		if _, _, err := decodeEvent(SSEEvent{Type: apiv1.EventStdout, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}
