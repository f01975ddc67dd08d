package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

// BenchmarkRootfs compares what a sandbox's root filesystem costs on the
// create path without and with a user namespace: mount the overlay (and,
// with one, make the user namespace descriptor and the idmapped view of the
// template), then unmount it.
func BenchmarkRootfs(b *testing.B) {
	airtest.RequireRoot(b)
	ctx := context.Background()
	base := b.TempDir()
	lower := filepath.Join(base, "lower")
	if err := os.Mkdir(lower, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, idmapped := range []bool{false, true} {
		name := "overlay"
		if idmapped {
			name = "idmapped-overlay"
		}
		b.Run(name, func(b *testing.B) {
			r := IDRange{Host: 1 << 30, Size: 65536}
			for i := 0; b.Loop(); i++ {
				dir := filepath.Join(base, name, "s"+strconv.Itoa(i))
				upper, work, scratch, target := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "lower"), filepath.Join(dir, "rootfs")
				for _, d := range []string{upper, work, scratch, target} {
					if err := os.MkdirAll(d, 0o700); err != nil {
						b.Fatal(err)
					}
				}
				if idmapped {
					if err := os.Chown(upper, int(r.Host), int(r.Host)); err != nil {
						b.Fatal(err)
					}
					userns, err := NewUserns(r)
					if err != nil {
						b.Fatal(err)
					}
					err = MountOverlayIDMapped(ctx, nil, lower, scratch, upper, work, target, userns)
					userns.Close()
					if err != nil {
						b.Fatal(err)
					}
				} else if err := MountOverlay(lower, upper, work, target); err != nil {
					b.Fatal(err)
				}
				if err := Unmount(ctx, nil, target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
