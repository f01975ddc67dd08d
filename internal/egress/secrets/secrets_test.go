package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

const clear = "s3cr3t-token-value"

func TestParsers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		what, in string
		ok       bool
		fn       func(string) error
	}{
		{"name", "gh-token", true, nameErr},
		{"name", "GH_TOKEN_2", true, nameErr},
		{"name", "", false, nameErr},
		{"name", "-x", false, nameErr},
		{"name", "a.b", false, nameErr},
		{"name", strings.Repeat("a", 65), false, nameErr},
		{"host", "api.example.com", true, hostErr},
		{"host", "*.example.com", true, hostErr},
		{"host", "API.Example.COM.", true, hostErr},
		{"host", "*", false, hostErr},
		// Public suffixes, and wildcards over them, are anyone's.
		{"host", "*.com", false, hostErr},
		{"host", "com", false, hostErr},
		{"host", "*.COM.", false, hostErr},
		{"host", "*.co.uk", false, hostErr},
		{"host", "co.uk", false, hostErr},
		{"host", "*.github.io", false, hostErr},
		{"host", "*.githubusercontent.com", false, hostErr},
		{"host", "*.s3.amazonaws.com", false, hostErr},
		{"host", "*.internal", false, hostErr},
		{"host", "localhost", false, hostErr},
		{"host", "*.example.co.uk", true, hostErr},
		{"host", "raw.githubusercontent.com", true, hostErr},
		{"host", "user.github.io", true, hostErr},
		{"host", "a.*.com", false, hostErr},
		{"host", "203.0.113.7", false, hostErr},
		{"host", "", false, hostErr},
		{"header", "", true, headerErr},
		{"header", "X-Api-Key", true, headerErr},
		{"header", "Host", false, headerErr},
		{"header", "content-length", false, headerErr},
		{"header", "Bad Header", false, headerErr},
		{"format", "Bearer {value}", true, formatErr},
		{"format", "{value}", true, formatErr},
		{"format", "", true, formatErr},
		{"format", "token", false, formatErr},
		{"format", "{value}{value}", false, formatErr},
		{"format", "Bearer {value}\r\nX: y", false, formatErr},
		{"value", clear, true, valueErr},
		{"value", "", false, valueErr},
		{"value", "a\nb", false, valueErr},
		{"value", "airlock-secret-x", false, valueErr},
		{"value", strings.Repeat("v", MaxValueSize+1), false, valueErr},
	} {
		err := tc.fn(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%s %q: err = %v, want ok=%v", tc.what, textclip.Bytes(tc.in, maxEcho), err, tc.ok)
		}
		if err != nil && !errors.Is(err, model.ErrInvalid) {
			t.Errorf("%s %q: %v does not wrap model.ErrInvalid", tc.what, textclip.Bytes(tc.in, maxEcho), err)
		}
	}
}

func nameErr(s string) error   { _, err := ParseName(s); return err }
func hostErr(s string) error   { _, err := ParseHost(s); return err }
func headerErr(s string) error { _, err := ParseHeader(s); return err }
func formatErr(s string) error { _, err := ParseFormat(s, "Authorization"); return err }
func valueErr(s string) error  { _, err := ParseValue([]byte(s)); return err }

func TestHostMatchAndApply(t *testing.T) {
	t.Parallel()
	hosts, err := ParseHosts([]string{"api.example.com", "*.example.org"})
	if err != nil {
		t.Fatal(err)
	}
	s := Secret{Name: "tok", Hosts: hosts, Header: DefaultHeader, Format: DefaultFormat(DefaultHeader), Value: Value(clear)}
	for host, want := range map[string]bool{
		"api.example.com": true, "API.example.com.": true, "example.com": false, "x.api.example.com": false,
		"raw.example.org": true, "example.org": false, "evilexample.org": false, "": false,
	} {
		if got := s.AppliesTo(host); got != want {
			t.Errorf("AppliesTo(%q) = %v, want %v", host, got, want)
		}
	}
	if got := s.HeaderValue(); got != "Bearer "+clear {
		t.Errorf("HeaderValue = %q", got)
	}
	if s.Placeholder() != "airlock-secret-tok" {
		t.Errorf("Placeholder = %q", s.Placeholder())
	}
	if DefaultFormat("X-Api-Key") != "{value}" {
		t.Error("DefaultFormat of another header")
	}
}

// TestValueNeverPrints: fmt, slog and JSON show the value redacted.
func TestValueNeverPrints(t *testing.T) {
	t.Parallel()
	s := Secret{Name: "tok", Value: Value(clear)}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "secret", s, "value", s.Value)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "secret", s, "value", s.Value)
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s.Value, s.Value, s.Value), buf.String(), string(js),
	} {
		if strings.Contains(out, clear) || strings.Contains(out, fmt.Sprintf("%x", clear)) {
			t.Errorf("value leaked: %s", out)
		}
	}
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenKey(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	sealed := s.Seal("prj_a", "tok", Value(clear))
	if bytes.Contains(sealed, []byte(clear)) {
		t.Fatal("sealed value holds the clear text")
	}
	if again := s.Seal("prj_a", "tok", Value(clear)); bytes.Equal(again, sealed) {
		t.Fatal("two seals of one value are equal (nonce reuse)")
	}
	v, err := s.Open("prj_a", "tok", sealed)
	if err != nil || string(v) != clear {
		t.Fatalf("Open = %v", err)
	}
	other, err := OpenKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(sealed)
	damaged[len(damaged)-1] ^= 1
	for name, open := range map[string]func() (Value, error){
		"other name":    func() (Value, error) { return s.Open("prj_a", "tok2", sealed) },
		"other project": func() (Value, error) { return s.Open("prj_b", "tok", sealed) },
		"other key":     func() (Value, error) { return other.Open("prj_a", "tok", sealed) },
		"damaged":       func() (Value, error) { return s.Open("prj_a", "tok", damaged) },
		"short":         func() (Value, error) { return s.Open("prj_a", "tok", sealed[:5]) },
		"empty":         func() (Value, error) { return s.Open("prj_a", "tok", nil) },
	} {
		if _, err := open(); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: err = %v, want ErrOpen", name, err)
		}
	}

	hosts, _ := ParseHosts([]string{"api.example.com"})
	sec := Secret{Project: "prj_a", Name: "tok", Hosts: hosts, Header: "X-Api-Key", Format: "{value}", Value: Value(clear)}
	rec := s.Record(sec)
	back, err := s.FromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(back.Value) != clear || back.Header != "X-Api-Key" || !back.AppliesTo("api.example.com") {
		t.Fatalf("FromRecord = %+v", back)
	}
}

func TestOpenKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	// Servers starting at once agree on one key.
	const n = 8
	sealers := make([]*Sealer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); sealers[i], errs[i] = OpenKey(path) }()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	sealed := sealers[0].Seal("p", "n", Value("v"))
	for i := range n {
		if _, err := sealers[i].Open("p", "n", sealed); err != nil {
			t.Fatalf("sealer %d has another key: %v", i, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("key file mode %s size %d", fi.Mode(), fi.Size())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	// Reopening keeps the key.
	again, err := OpenKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Open("p", "n", sealed); err != nil {
		t.Fatal(err)
	}
	// A key readable by others, or of the wrong size, is refused.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKey(path); err == nil {
		t.Fatal("a world-readable key was accepted")
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKey(short); err == nil {
		t.Fatal("a short key was accepted")
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.x.y", "*", "a..b", "1.2.3.4", "*.*.a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			return
		}
		again, err := ParseHost(h.String())
		if err != nil || again != h {
			t.Fatalf("%q → %q does not round-trip: %v", s, h, err)
		}
	})
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"tok", "A_b-c", "", "-", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err == nil && (string(n) != s || strings.ContainsAny(s, " \t\n/{}\"")) {
			t.Fatalf("accepted %q as %q", s, n)
		}
	})
}

func FuzzOpen(f *testing.F) {
	s, err := NewSealer(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s.Seal("p", "n", Value("v")))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := s.Open("p", "n", b)
		if err == nil && string(v) != "v" {
			t.Fatalf("forged value opened: %q", v)
		}
	})
}
