package secrets

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseHeaderRules(t *testing.T) {
	many := map[string]string{}
	for i := range MaxRuleHeaders + 1 {
		many["X-H"+strings.Repeat("a", i)] = "v"
	}
	var hosts []RawHeaderRule
	for i := range MaxRuleHosts + 1 {
		hosts = append(hosts, RawHeaderRule{Host: strings.Repeat("a", i+1) + ".example.com", Headers: map[string]string{"X": "1"}})
	}
	var big []RawHeaderRule // each value within its bound, the total over
	for i := range 5 {
		big = append(big, RawHeaderRule{Host: strings.Repeat("b", i+1) + ".example.com", Headers: map[string]string{"X": strings.Repeat("v", MaxRuleValueSize)}})
	}
	for _, tt := range []struct {
		name string
		in   []RawHeaderRule
		ok   bool
	}{
		{"one host", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"Authorization": "Bearer ${secrets.openai-key}", "X-Test": "v"}}}, true},
		{"wildcard", []RawHeaderRule{{Host: "*.example.com", Headers: map[string]string{"X": "1"}}}, true},
		{"none", nil, true},
		{"CRLF smuggling a header", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "v\r\nEvil: 1"}}}, false},
		{"LF", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "v\nEvil: 1"}}}, false},
		{"NUL", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "v\x00"}}}, false},
		{"CRLF in the name", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X\r\nEvil": "v"}}}, false},
		{"framing header", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"Host": "evil.example"}}}, false},
		{"transfer-encoding", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"transfer-encoding": "chunked"}}}, false},
		{"public suffix", []RawHeaderRule{{Host: "*.com", Headers: map[string]string{"X": "1"}}}, false},
		{"address", []RawHeaderRule{{Host: "192.0.2.1", Headers: map[string]string{"X": "1"}}}, false},
		{"no headers", []RawHeaderRule{{Host: "api.example.com"}}, false},
		{"host twice", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "1"}}, {Host: "API.example.com", Headers: map[string]string{"Y": "1"}}}, false},
		{"too many headers", []RawHeaderRule{{Host: "api.example.com", Headers: many}}, false},
		{"too many hosts", hosts, false},
		{"value too large", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": strings.Repeat("v", MaxRuleValueSize+1)}}}, false},
		{"total too large", big, false},
		{"unterminated placeholder", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "${secrets.abc"}}}, false},
		{"bad secret name", []RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X": "${secrets.a/../b}"}}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeaderRules(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid", err)
			}
			if tt.ok && len(got) != len(tt.in) {
				t.Fatalf("%d rules from %d", len(got), len(tt.in))
			}
		})
	}
}

func TestSealHeaderRules(t *testing.T) {
	s, err := NewSealer(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ParseHeaderRules([]RawHeaderRule{{Host: "api.example.com", Headers: map[string]string{"X-Token": "static-credential", "Authorization": "Bearer ${secrets.k}"}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.SealHeaderRules("prj_a", rules)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(h.Sealed, []byte("static-credential")) || len(h.Hosts) != 1 || strings.Join(h.Hosts[0].Names, ",") != "Authorization,X-Token" {
		t.Fatalf("sealed form %+v", h)
	}
	got, err := s.OpenHeaderRules("prj_a", h)
	if err != nil || len(got) != 1 || got[0].Headers[1].Value != "static-credential" {
		t.Fatalf("open: %+v, %v", got, err)
	}
	// Another project's sandbox cannot carry them: they do not open.
	if _, err := s.OpenHeaderRules("prj_b", h); !errors.Is(err, ErrOpen) {
		t.Fatalf("opened as another project's: %v", err)
	}
}

func TestResolve(t *testing.T) {
	vals := map[Name]Value{"k": Value("sk-1"), "j": Value("v2")}
	lookup := func(n Name) (Value, bool) { v, ok := vals[n]; return v, ok }
	for _, tt := range []struct{ in, want string }{
		{"Bearer ${secrets.k}", "Bearer sk-1"},
		{"${secrets.k}:${secrets.j}", "sk-1:v2"},
		{"plain", "plain"},
		{"${secrets.missing}", ""},
		{"${e2b.secrets.k}", "${e2b.secrets.k}"}, // not Airlock's placeholder: literal
	} {
		got, err := Resolve(tt.in, lookup)
		if (err != nil) != (tt.want == "") || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
