package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(store.SandboxCursor{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), ID: model.NewSandboxID()}))
	f.Add(encodeCursor(store.SandboxCursor{CreatedAt: time.Unix(-5, 0), ID: model.NewSandboxID()}))
	f.Add("")
	f.Add("AQ")
	f.Add("AAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if _, err := model.ParseSandboxID(c.ID.String()); err != nil {
			t.Fatalf("decoded an invalid ID: %v", err)
		}
		if encodeCursor(c) != s {
			t.Fatalf("%q decodes to %+v, which encodes differently", s, c)
		}
	})
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, ts := range []time.Time{time.Unix(0, 0), time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC), time.Unix(-1, 0)} {
		c := store.SandboxCursor{CreatedAt: ts.UTC(), ID: model.NewSandboxID()}
		got, err := decodeCursor(encodeCursor(c))
		if err != nil || !got.CreatedAt.Equal(c.CreatedAt) || got.ID != c.ID {
			t.Fatalf("round trip of %+v = %+v, %v", c, got, err)
		}
	}
}

func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"30s", "0", "0s", "60s", "61s", "1m", "1m0.5s", "-1s", "500ms", "1h", "", "x", "9223372036854775807ns", "1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseWait(url.Values{"wait": {s}})
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if d < 0 || d > MaxWait {
			t.Fatalf("wait %q accepted as %s", s, d)
		}
		if want, perr := time.ParseDuration(s); perr != nil || want != d {
			t.Fatalf("wait %q = %s, time.ParseDuration says %s, %v", s, d, want, perr)
		}
	})
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		q    url.Values
		want time.Duration
		ok   bool
	}{
		{url.Values{}, 0, true},
		{url.Values{"wait": {"30s"}}, 30 * time.Second, true},
		{url.Values{"wait": {"60s"}}, 60 * time.Second, true},
		{url.Values{"wait": {"1m0s"}}, time.Minute, true},
		{url.Values{"wait": {"60.001s"}}, 0, false},
		{url.Values{"wait": {"30"}}, 0, false},
		{url.Values{"wait": {"1s", "2s"}}, 0, false},
	} {
		d, err := parseWait(c.q)
		if (err == nil) != c.ok || d != c.want {
			t.Errorf("parseWait(%v) = %s, %v; want %s, ok=%v", c.q, d, err, c.want, c.ok)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary bodies to the strict decoder for every
// request type. It must never panic, must refuse with a 400, and the
// canonical form of what it accepts (the input of the idempotency request
// hash) must not depend on whitespace or key order: the body re-encoded with
// sorted keys and no whitespace has the same canonical form.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"cpus": 2, "env": {"A": "b"}}`, `{"template": "default"}`, `{"CPUS": 1}`, `{"cpus": null}`,
		`{"args": ["ls", "-l"], "cwd": "/"}`, `{"source": "/x", "name": "n"}`, `{"name": "p"}`,
		`{"project_id": "prj_aaaaaaaaaaaaaaaaaaaaaaaaaa", "role": "member"}`, `{} x`, `[]`, `{"a":1,"a":2}`,
		`{"env": {"A": "\u0000"}}`, "{\"cpus\": 1}\n", `{"metadata": {}}`, `{"memory_mib": 9007199254740993}`,
		`{"egress": {"default": "none", "allow": ["pypi.org:443"], "profiles": ["p"]}}`, `{"allow": ["*.x.y"], "deny": ["10.0.0.0/8"]}`,
		`{"host": "pypi.org", "port": 443}`, `{"value": "v", "hosts": ["a.example"], "header": "X-Key"}`,
	} {
		f.Add([]byte(s))
	}
	targets := []func() any{
		func() any { return new(apiv1.CreateSandboxRequest) },
		func() any { return new(apiv1.CreateCommandRequest) },
		func() any { return new(apiv1.ImportTemplateRequest) },
		func() any { return new(apiv1.CreateProjectRequest) },
		func() any { return new(apiv1.CreateAPIKeyRequest) },
		func() any { return new(apiv1.EgressPolicy) },
		func() any { return new(apiv1.PutEgressProfileRequest) },
		func() any { return new(apiv1.ExplainEgressRequest) },
		func() any { return new(putSecretBody) },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range targets {
			dst := mk()
			present, err := decodeStrict(body, dst)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.status != 400 {
					t.Fatalf("error %v is not a 400", err)
				}
				continue
			}
			for name := range present {
				if !jsonFields(reflect.TypeOf(dst).Elem())[name] {
					t.Fatalf("accepted unknown field %q", name)
				}
			}
			canonical, err := json.Marshal(dst)
			if err != nil {
				t.Fatal(err)
			}
			// The same request spelled differently.
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			var generic any
			if err := dec.Decode(&generic); err != nil {
				t.Fatalf("accepted %q, which encoding/json cannot decode: %v", body, err)
			}
			respelled, err := json.Marshal(generic)
			if err != nil {
				t.Fatal(err)
			}
			again := mk()
			if _, err := decodeStrict(respelled, again); err != nil {
				t.Fatalf("%q is accepted but its respelling %s is not: %v", body, respelled, err)
			}
			c2, _ := json.Marshal(again)
			if !bytes.Equal(canonical, c2) {
				t.Fatalf("%q and %s have different canonical forms: %s vs %s", body, respelled, canonical, c2)
			}
		}
	})
}

func FuzzParseSandboxQuery(f *testing.F) {
	for _, s := range []string{"", "state=running&state=pending", "metadata=a%3Db&metadata=c%3Dd", "limit=5", "cursor=AQ", "x=1", "state=zzz", "metadata=a%3Db&metadata=a%3Dc", "limit=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		sq, err := parseSandboxQuery("prj_aaaaaaaaaaaaaaaaaaaaaaaaaa", q)
		if err != nil {
			var ae *apiError
			if !errors.Is(err, model.ErrInvalid) && !(errors.As(err, &ae) && ae.status == 400) {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if sq.Limit < 1 || sq.Limit > maxListLimit || len(sq.States) == 0 {
			t.Fatalf("accepted query %q as %+v", raw, sq)
		}
		for _, st := range sq.States {
			if _, err := model.ParseSandboxState(string(st)); err != nil {
				t.Fatalf("accepted state %q", st)
			}
		}
		if _, ok := q["state"]; !ok {
			for _, st := range sq.States {
				if st == model.StateDeleted {
					t.Fatal("deleted sandboxes listed without asking")
				}
			}
		}
	})
}

func FuzzParseProjectName(f *testing.F) {
	for _, s := range []string{"default", "a", "-a", "a.b_c-d", "", "ä", "x y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := parseProjectName(s)
		if err != nil {
			return
		}
		if name != s || len(s) == 0 || len(s) > 63 {
			t.Fatalf("accepted %q", s)
		}
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 || s[i] <= ' ' || s[i] == '/' {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}

// FuzzParseEgressPolicy: a policy body is refused with a 400 or parses into
// a Spec whose wire form parses back to the same Spec.
func FuzzParseEgressPolicy(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"default": "none", "allow": ["pypi.org:443", "*.github.com", "203.0.113.0/24:22", "[2001:db8::1]:443"]}`,
		`{"deny": ["10.0.0.0/8"], "profiles": ["a", "b"], "tls_exempt": ["bank.example"]}`, `{"allow": [""]}`,
		`{"allow": ["a..b"]}`, `{"default": "x"}`, `{"tls_exempt": ["a.example:443"]}`, `{"allow": ["1.2.3.4:0"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in apiv1.EgressPolicy
		if _, err := decodeStrict(body, &in); err != nil {
			return
		}
		spec, err := parseEgressPolicy(in)
		if err != nil {
			if ae, ok := classify(err); !ok || ae.status != 400 {
				t.Fatalf("%q: error %v is not a 400", body, err)
			}
			return
		}
		again, err := parseEgressPolicy(egressPolicyOut(spec))
		if err != nil {
			t.Fatalf("%q parsed, but its wire form %+v does not: %v", body, egressPolicyOut(spec), err)
		}
		if !reflect.DeepEqual(again, spec) {
			t.Fatalf("%q: %+v does not round-trip (%+v)", body, spec, again)
		}
	})
}
