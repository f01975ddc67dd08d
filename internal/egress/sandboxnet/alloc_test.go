package sandboxnet

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
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

// TestAllocate: slots are recorded, reused on repeat, probed past collisions,
// freed with the allocation file, and a full pool is an error. File
// operations only: no privileges needed.
func TestAllocate(t *testing.T) {
	p, err := NewPool(netip.MustParsePrefix("192.168.77.0/28"), t.TempDir()) // 4 slots
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]model.SandboxID{}
	var ids []model.SandboxID
	for range 4 {
		id := model.NewSandboxID()
		s, fresh, err := p.allocate(id)
		if err != nil || !fresh {
			t.Fatalf("allocate: %d %v %v", s, fresh, err)
		}
		if other, ok := seen[s]; ok {
			t.Fatalf("slot %d given to %s and %s", s, other, id)
		}
		seen[s] = id
		ids = append(ids, id)
		if again, fresh, err := p.allocate(id); err != nil || fresh || again != s {
			t.Fatalf("repeat allocate: %d %v %v, want %d", again, fresh, err, s)
		}
	}
	if _, _, err := p.allocate(model.NewSandboxID()); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("fifth allocation in a 4-slot pool: %v", err)
	}
	// Free one; the next sandbox gets exactly that slot.
	freed, _, _ := p.allocate(ids[2])
	if err := os.Remove(p.allocPath(ids[2])); err != nil {
		t.Fatal(err)
	}
	if s, _, err := p.allocate(model.NewSandboxID()); err != nil || s != freed {
		t.Fatalf("after freeing %d got %d, %v", freed, s, err)
	}
	// A damaged allocation file is replaced by a fresh allocation.
	if err := os.WriteFile(p.allocPath(ids[0]), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.allocPath(ids[1])); err != nil {
		t.Fatal(err)
	}
	if _, fresh, err := p.allocate(ids[0]); err != nil || !fresh {
		t.Fatalf("damaged file: fresh=%v, %v", fresh, err)
	}
	left, err := p.Leftovers()
	if err != nil || len(left) != 3 { // ids[0], ids[3] and the one that took the freed slot
		t.Fatalf("Leftovers = %v, %v", left, err)
	}
}

// TestReconcileRemovesTemporaries: an allocation write interrupted by a crash
// leaves a temporary file that Reconcile removes; kept allocations stay.
func TestReconcileRemovesTemporaries(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPool(netip.MustParsePrefix("192.168.78.0/28"), dir)
	if err != nil {
		t.Fatal(err)
	}
	id := model.NewSandboxID()
	if _, _, err := p.allocate(id); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+string(id)+".slot.tmp-123")
	other := filepath.Join(dir, "README")
	for _, f := range []string{tmp, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := p.Reconcile(context.Background(), func(model.SandboxID) bool { return true })
	if err != nil || len(removed) != 0 {
		t.Fatalf("Reconcile = %v, %v", removed, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary survived: %v", err)
	}
	for _, f := range []string{other, p.allocPath(id)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
