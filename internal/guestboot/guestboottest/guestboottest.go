// Package guestboottest gives tests the suite's cache of VM boot inputs with
// the guest kernel already in it.
package guestboottest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/guestboot"
)

// Cache is the test suite's cache of VM boot inputs
// ($AIRLOCK_GUESTBOOT_CACHE, else $AIRLOCK_TEST_CACHE/guestboot, default
// /var/cache/airlock-test/guestboot, like the other expensive test inputs;
// the builds inside are keyed by their input digests), holding the pinned
// guest kernel: Cache downloads it when missing, in the machine's network
// namespace (netnstest.InHost), so that a package whose tests run in a
// namespace of their own, or a server a test starts in one, finds it
// without a route out and without another package having run first.
//
// Without the kernel the test fails in CI (CI installs and reaches
// everything it needs) and is skipped elsewhere.
func Cache(t testing.TB) string {
	t.Helper()
	airtest.SkipShort(t, "a VM's boot inputs")
	dir := os.Getenv("AIRLOCK_GUESTBOOT_CACHE")
	if dir == "" {
		base, err := airtest.TestCache()
		if err != nil {
			t.Fatalf("guest boot cache: %v", err)
		}
		dir = filepath.Join(base, "guestboot")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("guest boot cache: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := guestboot.DefaultKernel
	start := time.Now()
	var fetched bool
	err := netnstest.InHost(func() (err error) {
		fetched, err = guestboot.FetchKernel(ctx, dir, k)
		return err
	})
	switch {
	case err == nil && fetched:
		t.Logf("guest kernel %s=%s fetched into %s in %v", k.Package, k.Version, dir, time.Since(start).Round(time.Millisecond))
	case err == nil:
	case os.Getenv("CI") != "":
		t.Fatalf("CI must run this test: guest kernel %s=%s: %v", k.Package, k.Version, err)
	case strings.Contains(err.Error(), "apt-get download"):
		t.Skipf("guest kernel %s=%s unavailable (needs Debian's archive and apt-get update): %v", k.Package, k.Version, err)
	default:
		t.Fatalf("guest kernel %s=%s: %v", k.Package, k.Version, err)
	}
	return dir
}
