package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

func TestIDPoolDefaults(t *testing.T) {
	tests := []struct {
		name    string
		pool    runtime.IDPool
		want    runtime.IDPool
		wantErr bool
	}{
		{"zero value", runtime.IDPool{}, runtime.IDPool{Base: DefaultIDBase, Count: DefaultIDRanges}, false},
		{"explicit", runtime.IDPool{Base: 200000, Count: 3}, runtime.IDPool{Base: 200000, Count: 3}, false},
		{"base below one range", runtime.IDPool{Base: 1000, Count: 1}, runtime.IDPool{}, true},
		{"negative count", runtime.IDPool{Base: 200000, Count: -1}, runtime.IDPool{}, true},
		{"beyond the largest id", runtime.IDPool{Base: 1 << 31, Count: 1 << 15}, runtime.IDPool{}, true},
		{"up to the largest id", runtime.IDPool{Base: 1<<32 - 1 - 2*IDRangeSize, Count: 2}, runtime.IDPool{Base: 1<<32 - 1 - 2*IDRangeSize, Count: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.pool.WithDefaults(idPoolRules)
			if (err != nil) != tt.wantErr {
				t.Fatalf("WithDefaults() = %+v, %v; want error %v", got, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("WithDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestIDAllocator allocates, records, finds again after a restart (a new
// allocator loading the state root), frees and exhausts ranges.
func TestIDAllocator(t *testing.T) {
	root := t.TempDir()
	stateDir := func(name string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	pool := runtime.IDPool{Base: 1 << 20, Count: 3}
	a := newIDAllocator(pool)
	alloc := func(a *idAllocator, name string) rootfs.IDRange {
		t.Helper()
		r, err := a.allocate(name, stateDir(name))
		if err != nil {
			t.Fatalf("allocate(%s): %v", name, err)
		}
		return r
	}
	ra, rb := alloc(a, "a"), alloc(a, "b")
	if ra != (rootfs.IDRange{Host: 1 << 20, Size: IDRangeSize}) || rb != (rootfs.IDRange{Host: 1<<20 + IDRangeSize, Size: IDRangeSize}) {
		t.Fatalf("first two ranges = %s, %s", ra, rb)
	}
	if again := alloc(a, "a"); again != ra {
		t.Fatalf("allocate(a) again = %s, want its recorded %s", again, ra)
	}

	// A restarted server: a new allocator learns a and b from their state dirs.
	b := newIDAllocator(pool)
	if err := b.load(root); err != nil {
		t.Fatal(err)
	}
	rc := alloc(b, "c")
	if rc.Host != 1<<20+2*IDRangeSize {
		t.Fatalf("after a restart, c got %s, which a or b holds", rc)
	}
	if _, err := b.allocate("d", stateDir("d")); err == nil {
		t.Fatal("allocated a fourth range from a pool of three")
	}
	// Delete frees a: the state dir goes, then the range.
	if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	b.release("a")
	if rd := alloc(b, "d"); rd != ra {
		t.Fatalf("d got %s, want a's freed %s", rd, ra)
	}

	// A malformed record is an error, not a fresh range.
	if err := os.WriteFile(filepath.Join(stateDir("e"), rangeFile), []byte("12 x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.allocate("e", filepath.Join(root, "e")); err == nil {
		t.Fatal("allocate accepted a malformed record")
	}
	if err := newIDAllocator(pool).load(root); err == nil {
		t.Fatal("load accepted a malformed record")
	}
}
