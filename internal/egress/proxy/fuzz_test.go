package proxy

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/egress/policy"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		ip   string
		port uint16
		bad  bool
	}{
		{in: "Example.COM", name: "example.com"},
		{in: "example.com.", name: "example.com"},
		{in: "example.com:8080", name: "example.com", port: 8080},
		{in: "203.0.113.7", ip: "203.0.113.7"},
		{in: "203.0.113.7:80", ip: "203.0.113.7", port: 80},
		{in: "[2001:db8::1]", ip: "2001:db8::1"},
		{in: "[2001:db8::1]:443", ip: "2001:db8::1", port: 443},
		{in: "[::ffff:203.0.113.7]", ip: "203.0.113.7"},
		{in: "", bad: true},
		{in: "example.com:", bad: true},
		{in: "example.com:0", bad: true},
		{in: "example.com:65536", bad: true},
		{in: "example.com:+80", bad: true},
		{in: "2001:db8::1", bad: true},
		{in: "[2001:db8::1", bad: true},
		{in: "[2001:db8::1]x", bad: true},
		{in: "[203.0.113.7]", bad: true},
		{in: "[fe80::1%eth0]", bad: true},
		{in: "a b", bad: true},
		{in: "1.2.3", bad: true}, // numeric last label: an address in disguise
		{in: "0x7f.1", bad: true},
		{in: "evil.com@good.com", bad: true},
	} {
		got, err := parseHost(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseHost(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseHost(%q): %v", tc.in, err)
			continue
		}
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		if got.name != tc.name || got.ip != ip || got.port != tc.port {
			t.Errorf("parseHost(%q) = %+v", tc.in, got)
		}
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"example.com", "example.com:80", "[2001:db8::1]:443", "203.0.113.7", "a..b", "[::1]", "x:y:z", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHost(s)
		if err != nil {
			return
		}
		if (h.name == "") == !h.ip.IsValid() {
			t.Fatalf("%q: exactly one of name and ip must be set: %+v", s, h)
		}
		if h.name != "" {
			if n, err := policy.NormalizeName(h.name); err != nil || n != h.name {
				t.Fatalf("%q: name %q not normalized (%q, %v)", s, h.name, n, err)
			}
			if strings.ContainsAny(h.name, ":[]@/ ") {
				t.Fatalf("%q: name %q", s, h.name)
			}
		}
		if h.ip.IsValid() && (h.ip.Is4In6() || h.ip.Zone() != "") {
			t.Fatalf("%q: address %v not unmapped or has a zone", s, h.ip)
		}
	})
}

func FuzzPeekClientHello(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	for _, n := range []string{"example.com", ""} {
		f.Add(capture(f, n))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hello, consumed, err := peekClientHello(bytes.NewReader(b))
		if !bytes.HasPrefix(b, consumed) {
			t.Fatalf("the bytes returned for replay are not a prefix of the input")
		}
		if len(consumed) > maxHelloBytes {
			t.Fatalf("read %d bytes, more than %d", len(consumed), maxHelloBytes)
		}
		if err == nil && hello == nil {
			t.Fatal("no error and no hello")
		}
		// The replayed stream is exactly the input.
		rest, _ := io.ReadAll(io.MultiReader(bytes.NewReader(consumed), bytes.NewReader(b[len(consumed):])))
		if !bytes.Equal(rest, b) {
			t.Fatal("replay differs from the input")
		}
	})
}
