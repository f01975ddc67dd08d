package sandboxnet

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestHostIfName(t *testing.T) {
	id := model.SandboxID("sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	n := HostIfName(id)
	if len(n) != 15 || !strings.HasPrefix(n, IfPrefix) {
		t.Fatalf("HostIfName = %q, want 15 bytes starting with %q", n, IfPrefix)
	}
	if HostIfName(id) != n {
		t.Fatal("HostIfName is not deterministic")
	}
	if HostIfName(model.NewSandboxID()) == n {
		t.Fatal("two IDs share a name")
	}
}

func TestSlotAddrs(t *testing.T) {
	p := netip.MustParsePrefix("10.213.0.0/16")
	for _, tc := range []struct {
		slot        int
		host, guest string
	}{
		{0, "10.213.0.1/30", "10.213.0.2/30"},
		{1, "10.213.0.5/30", "10.213.0.6/30"},
		{64, "10.213.1.1/30", "10.213.1.2/30"},
		{16383, "10.213.255.253/30", "10.213.255.254/30"},
	} {
		h, g := slotAddrs(p, tc.slot)
		if h.String() != tc.host || g.String() != tc.guest {
			t.Errorf("slot %d: %s %s, want %s %s", tc.slot, h, g, tc.host, tc.guest)
		}
	}
	if n := slotCount(p); n != 16384 {
		t.Errorf("slotCount = %d", n)
	}
	if n := slotCount(netip.MustParsePrefix("192.168.7.0/30")); n != 1 {
		t.Errorf("slotCount /30 = %d", n)
	}
}

func TestParseAlloc(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -1: error
	}{
		{"airlock-sandboxnet v1 slot 0\n", 0},
		{"airlock-sandboxnet v1 slot 17\n", 17},
		{"airlock-sandboxnet v1 slot 99\n", 99},
		{"airlock-sandboxnet v1 slot 100\n", -1}, // outside a 100-slot pool
		{"airlock-sandboxnet v1 slot 17", -1},    // torn write
		{"airlock-sandboxnet v1 slot \n", -1},
		{"airlock-sandboxnet v1 slot 017\n", -1},
		{"airlock-sandboxnet v1 slot -1\n", -1},
		{"airlock-sandboxnet v1 slot +1\n", -1},
		{"airlock-sandboxnet v1 slot 1 \n", -1},
		{"airlock-sandboxnet v1 slot 99999999999\n", -1},
		{"airlock-sandboxnet v2 slot 1\n", -1},
		{"", -1},
		{"17\n", -1},
	} {
		got, err := parseAlloc([]byte(tc.in), 100)
		if tc.want < 0 {
			if err == nil || !errors.Is(err, errBadAlloc) {
				t.Errorf("parseAlloc(%q) = %d, %v; want errBadAlloc", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseAlloc(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseAlloc(f *testing.F) {
	f.Add([]byte("airlock-sandboxnet v1 slot 0\n"))
	f.Add([]byte("airlock-sandboxnet v1 slot 16383\n"))
	f.Add([]byte("airlock-sandboxnet v1 slot 0017\n"))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const n = 16384
		s, err := parseAlloc(data, n)
		if err != nil {
			return
		}
		if s < 0 || s >= n {
			t.Fatalf("slot %d outside [0,%d)", s, n)
		}
		if !bytes.Equal(formatAlloc(s), data) {
			t.Fatalf("%q parsed to %d, which formats as %q", data, s, formatAlloc(s))
		}
	})
}

func TestFormatParseRoundTrip(t *testing.T) {
	for _, s := range []int{0, 1, 9, 10, 16383} {
		if got, err := parseAlloc(formatAlloc(s), 16384); err != nil || got != s {
			t.Errorf("round trip %d: %d, %v", s, got, err)
		}
	}
}

func TestNewPoolRejects(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"10.213.0.1/16", "8.8.0.0/16", "10.213.0.0/31", "10.0.0.0/7", "fd00::/64"} {
		if _, err := NewPool(netip.MustParsePrefix(p), dir); err == nil {
			t.Errorf("NewPool(%s) accepted", p)
		}
	}
	if _, err := NewPool(netip.Prefix{}, "relative/dir"); err == nil {
		t.Error("relative directory accepted")
	}
	p, err := NewPool(netip.Prefix{}, dir)
	if err != nil || p.Prefix() != DefaultPrefix {
		t.Fatalf("zero prefix: %v, %v", p, err)
	}
}

func TestPreferredSlotSpread(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 50; i++ {
		s := preferredSlot(model.NewSandboxID(), 16384)
		if s < 0 || s >= 16384 {
			t.Fatalf("slot %d", s)
		}
		seen[s] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 IDs map to only %d slots", len(seen))
	}
}
