package qemu

import (
	"slices"
	"testing"

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
		in      VMIDPool
		want    VMIDPool
		wantErr bool
	}{
		{VMIDPool{}, VMIDPool{DefaultVMIDBase, DefaultVMIDCount}, false},
		{VMIDPool{Base: 200000, Count: 10}, VMIDPool{200000, 10}, false},
		{VMIDPool{Base: 1000}, VMIDPool{}, true},                  // among the host's users
		{VMIDPool{Base: 1<<32 - 10, Count: 20}, VMIDPool{}, true}, // past the largest id
		{VMIDPool{Count: -1}, VMIDPool{}, true},
	} {
		got, err := tc.in.withDefaults()
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("%+v: %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	p := VMIDPool{Base: 100000, Count: 2}
	for id, want := range map[uint32]bool{99999: false, 100000: true, 100001: true, 100002: false} {
		if p.contains(id) != want {
			t.Errorf("contains(%d) = %v", id, !want)
		}
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
