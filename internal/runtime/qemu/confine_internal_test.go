package qemu

import (
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

func TestChainOver(t *testing.T) {
	img := diskLayer{"/s/.images/t.ext4", vmdisk.Raw}
	baseDisk := diskLayer{"/s/.base/k/disk", vmdisk.QCOW2}
	layer := diskLayer{"/s/id/layer-1", vmdisk.QCOW2}
	for _, tc := range []struct {
		name      string
		format    vmdisk.Format
		base      diskLayer
		baseChain []diskLayer
		want      []diskLayer
	}{
		{"reflink clone of an image", vmdisk.Raw, img, nil, nil},
		{"qcow2 over an image", vmdisk.QCOW2, img, nil, []diskLayer{img}},
		{"qcow2 over a raw base ignores a chain it cannot have", vmdisk.QCOW2, img, []diskLayer{baseDisk}, []diskLayer{img}},
		{"clone of a base disk", vmdisk.QCOW2, baseDisk, []diskLayer{img}, []diskLayer{baseDisk, img}},
		{"wake over a layer", vmdisk.QCOW2, layer, []diskLayer{baseDisk, img}, []diskLayer{layer, baseDisk, img}},
	} {
		if got := chainOver(tc.format, tc.base, tc.baseChain); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestVMIDPool(t *testing.T) {
	for _, tc := range []struct {
		in      runtime.IDPool
		want    runtime.IDPool
		wantErr bool
	}{
		{runtime.IDPool{}, runtime.IDPool{Base: DefaultVMIDBase, Count: DefaultVMIDCount}, false},
		{runtime.IDPool{Base: 200000, Count: 10}, runtime.IDPool{Base: 200000, Count: 10}, false},
		{runtime.IDPool{Base: 1000}, runtime.IDPool{}, true},                  // among the host's users
		{runtime.IDPool{Base: 1<<32 - 10, Count: 20}, runtime.IDPool{}, true}, // past the largest id
		{runtime.IDPool{Count: -1}, runtime.IDPool{}, true},
	} {
		got, err := tc.in.WithDefaults(vmIDRules)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("%+v: %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	p := runtime.IDPool{Base: 100000, Count: 2}
	for id, want := range map[uint32]bool{99999: false, 100000: true, 100001: true, 100002: false} {
		if p.Contains(id, 1) != want {
			t.Errorf("Contains(%d) = %v", id, !want)
		}
	}
	// Blocks of a range: the oci pool's shape.
	p = runtime.IDPool{Base: 1 << 20, Count: 2}
	if p.Block(1, 1<<16) != 1<<20+1<<16 || !p.Contains(1<<20+2<<16-1, 1<<16) || p.Contains(1<<20+2<<16, 1<<16) {
		t.Errorf("blocks of 65536: Block(1) = %d", p.Block(1, 1<<16))
	}
}

func TestWithin(t *testing.T) {
	for p, want := range map[string]bool{
		"/s/id/memory": true, "/s/id": false, "/s/id/../x/memory": false, "/s/.base/k/memory": false, "/s/id/sub/memory": false,
	} {
		if within("/s/id", p) != want {
			t.Errorf("within(/s/id, %s) = %v", p, !want)
		}
	}
}
