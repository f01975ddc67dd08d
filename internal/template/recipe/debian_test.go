package recipe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/template"
)

// testCacheDir is the shared recipe build cache of the tests:
// $AIRLOCK_TEST_CACHE (else /var/cache/airlock-test)/recipe-cache-v1, with
// the template store the Debian test builds into beside it
// (recipe-store-v1). The first run on a machine bootstraps Debian (40 s to
// 2 min); later ones find everything built.
func testCacheDir(t *testing.T) string {
	t.Helper()
	d, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "recipe-cache-v1")
}

func TestBuildDefaultDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Debian (-short)")
	}
	airtest.RequireRoot(t)
	if _, err := mmdebstrapVersion(t.Context()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs mmdebstrap (scripts/install-deps.sh): %v", err)
		}
		t.Skipf("needs mmdebstrap (apt-get install mmdebstrap; CI installs it): %v", err)
	}
	// The store is cached too (beside the build cache): a fresh store
	// would import the 450 MB tree from the cache's tar on every run, which
	// TestBuildCacheChain covers on a small tree.
	// Shared with the integration tests' servers (fillRecipeCache), which
	// may be importing into it now: checkClean must see it at rest.
	storeDir := filepath.Join(filepath.Dir(testCacheDir(t)), "recipe-store-v1")
	t.Cleanup(airtest.LockShared(t, storeDir)) // released after checkClean
	s, err := template.Open(storeDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkClean(t, s) })
	b := &Builder{Store: s, CacheDir: testCacheDir(t)}
	res, log := build(t, b, Default(), t.TempDir())
	t.Logf("default: %s (%d MB, %d entries)\n%s", res.Imported.Digest, res.Imported.SizeBytes>>20, res.Imported.Entries, log)
	root := b.Store.RootfsDir(res.Imported.Digest)
	for _, p := range []string{"usr/bin/python3", "usr/bin/node", "usr/bin/npm", "usr/bin/git", "usr/bin/curl", "usr/bin/bash", "usr/bin/ps",
		"etc/ssl/certs/ca-certificates.crt"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("default template: %v", err)
		}
	}
	for _, p := range []string{"var/lib/apt/lists", "var/cache/apt/archives"} {
		ents, _ := os.ReadDir(filepath.Join(root, p))
		for _, e := range ents {
			if e.Name() != "partial" && e.Name() != "lock" && e.Name() != "auxfiles" {
				t.Errorf("%s not cleaned: %s", p, e.Name())
				break
			}
		}
	}
	// E2B's default user, with its home.
	if passwd := readTree(t, b, res.Imported.Digest, "etc/passwd"); !strings.Contains(passwd, "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("no user 1000 in /etc/passwd:\n%s", passwd)
	}
	if st, err := os.Stat(filepath.Join(root, "home/user")); err != nil || !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("/home/user: %v %v", st, err)
	}
	// E2B's base: python is python3, and user may sudo without a password
	// (sudo setuid root; its rule root's and read-only, or sudo ignores it).
	if target, err := os.Readlink(filepath.Join(root, "usr/bin/python")); err != nil || !strings.HasPrefix(target, "python3") {
		t.Errorf("/usr/bin/python -> %q, %v", target, err)
	}
	if st, err := os.Stat(filepath.Join(root, "usr/bin/sudo")); err != nil || st.Mode()&os.ModeSetuid == 0 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("/usr/bin/sudo: %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(root, "etc/sudoers.d/user")); err != nil || st.Mode().Perm() != 0o440 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("/etc/sudoers.d/user: %v %v", st, err)
	} else if rule := readTree(t, b, res.Imported.Digest, "etc/sudoers.d/user"); rule != "user ALL=(ALL:ALL) NOPASSWD: ALL\n" {
		t.Errorf("/etc/sudoers.d/user = %q", rule)
	}
	if imp, ok, err := b.Cached(Default(), ""); err != nil || !ok || imp.Digest != res.Imported.Digest {
		t.Errorf("Cached(Default()) = %s %v %v", imp.Digest, ok, err)
	}

	// A run step on top: the default's steps come from the cache.
	// default.yaml ends with its steps list, so the step is appended to it.
	r := mustParse(t, string(DefaultYAML())+"  - run: \"python3 -c 'print(6*7)' > /answer && node -e 'console.log(6*7)' >> /answer\"\n")
	res2, log2 := build(t, b, r, t.TempDir())
	if len(res2.Steps) != len(res.Steps)+1 {
		t.Fatalf("%d steps on top of the default's %d:\n%s", len(res2.Steps), len(res.Steps), log2)
	}
	for i, st := range res.Steps {
		if !res2.Steps[i].Cached || res2.Steps[i].Digest != st.Digest {
			t.Errorf("step %d (%s) was rebuilt:\n%s", i+1, st.Kind, log2)
		}
	}
	if got := readTree(t, b, res2.Imported.Digest, "answer"); got != "42\n42\n" {
		t.Errorf("answer = %q\n%s", got, log2)
	}
	last := fmt.Sprintf("step %d/%d run", len(res2.Steps), len(res2.Steps))
	if !strings.Contains(log2, last) || !strings.Contains(log2, "CACHED") && !strings.Contains(log2, "built in") {
		t.Errorf("log lacks %q:\n%s", last, log2)
	}
}
