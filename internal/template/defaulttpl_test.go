package template

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

func TestEnsureDefault(t *testing.T) {
	bb := airtest.BusyboxPath(t)
	ctx := context.Background()
	s1, _ := newStore(t)
	s2, _ := newStore(t)
	a, err := s1.EnsureDefault(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s2.EnsureDefault(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || !bytes.Equal(a.Manifest, b.Manifest) {
		t.Fatalf("not deterministic: %s vs %s", a.Digest, b.Digest)
	}
	if a.Reused || b.Reused {
		t.Error("first build reported Reused")
	}
	again, err := s1.EnsureDefault(ctx, bb)
	if err != nil || !again.Reused || again.Digest != a.Digest {
		t.Fatalf("second EnsureDefault = %+v, %v; want the same digest, Reused", again, err)
	}
	if err := s1.Verify(ctx, a.Digest); err != nil {
		t.Fatal(err)
	}

	root := s1.RootfsDir(a.Digest)
	if target, err := os.Readlink(filepath.Join(root, "bin/sh")); err != nil || target != "busybox" {
		t.Errorf("/bin/sh -> %q, %v; want busybox", target, err)
	}
	want, _ := os.ReadFile(bb)
	if got, err := os.ReadFile(filepath.Join(root, "bin/busybox")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("/bin/busybox differs from %s (%v)", bb, err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if target, err := os.Readlink(filepath.Join(root, "bin", applet)); err != nil || target != "busybox" {
			t.Errorf("/bin/%s -> %q, %v", applet, target, err)
		}
	}
	for rel, mode := range map[string]uint32{
		".": 0o755, "dev": 0o755, "proc": 0o555, "sys": 0o555, "tmp": 0o1777, "root": 0o700, "run": 0o755,
		"home": 0o755, ".airlock": 0o755, ".airlock/bin": 0o755, ".airlock/run": 0o755,
	} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, rel), &st); err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if st.Mode != syscall.S_IFDIR|mode || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: mode %o owner %d:%d, want directory %o root:root", rel, st.Mode, st.Uid, st.Gid, mode)
		}
	}
	for _, rel := range []string{"dev", "proc", "sys", "tmp", ".airlock/bin", ".airlock/run"} {
		if names := listDir(t, filepath.Join(root, rel)); len(names) != 0 {
			t.Errorf("/%s is not empty: %v", rel, names)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, ".airlock/bin/airlock-agent")); err == nil {
		t.Error("the agent is part of the template")
	}
	for rel, want := range map[string]string{"etc/passwd": "root:x:0:0:", "etc/group": "root:x:0:", "etc/hosts": "127.0.0.1\tlocalhost"} {
		if data, err := os.ReadFile(filepath.Join(root, rel)); err != nil || !strings.Contains(string(data), want) {
			t.Errorf("/%s = %q, %v; want it to contain %q", rel, data, err, want)
		}
	}
	// The tree works: busybox runs its shell from inside it.
	if out, err := exec.Command(filepath.Join(root, "bin/sh"), "-c", "echo ok").Output(); err != nil || string(out) != "ok\n" {
		t.Errorf("bin/sh -c 'echo ok' = %q, %v", out, err)
	}
}

func TestEnsureDefaultRefusesUnusableBusybox(t *testing.T) {
	s, tmp := newStore(t)
	ctx := context.Background()
	text := filepath.Join(tmp, "busybox.txt")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ path, want string }{
		"missing":   {filepath.Join(tmp, "nope"), "busybox-static"},
		"directory": {tmp, "not a regular file"},
		"not ELF":   {text, "not an ELF executable"},
	}
	// A dynamically linked binary from the host, if there is one.
	for _, p := range []string{"/bin/ls", "/usr/bin/env", "/bin/true"} {
		if data, err := os.ReadFile(p); err == nil && bytes.Contains(data, []byte("ld-linux")) {
			cases["dynamic"] = struct{ path, want string }{p, "dynamically linked"}
			break
		}
	}
	for name, c := range cases {
		_, err := s.EnsureDefault(ctx, c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
	requireEmptyStore(t, s)
}

// A second EnsureDefault with the same busybox neither runs busybox nor
// stages the tree again: it finds the build it remembered. A record that
// names a template the store lacks is rebuilt.
func TestEnsureDefaultRemembered(t *testing.T) {
	src := airtest.BusyboxPath(t)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bb := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bb, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, _ := newStore(t)
	first, err := s.EnsureDefault(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	// Not executable: a rebuild would fail at `busybox --list`.
	if err := os.Chmod(bb, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := s.EnsureDefault(ctx, bb)
	if err != nil {
		t.Fatalf("the second EnsureDefault rebuilt the template: %v", err)
	}
	if again.Digest != first.Digest || !again.Reused || !bytes.Equal(again.Manifest, first.Manifest) {
		t.Fatalf("second EnsureDefault = %+v; want %s, Reused", again, first.Digest)
	}

	// A record naming a template the store does not have is not trusted.
	record := s.defaultRecord(data)
	missing := "sha256:" + strings.Repeat("0", 64)
	if err := os.WriteFile(record, []byte(missing+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureDefault(ctx, bb); err == nil {
		t.Fatal("a record of a missing template was trusted (no rebuild was tried)")
	}
	if err := os.Chmod(bb, 0o755); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := s.EnsureDefault(ctx, bb)
	if err != nil || rebuilt.Digest != first.Digest {
		t.Fatalf("rebuild = %+v, %v; want %s", rebuilt, err, first.Digest)
	}
	if b, err := os.ReadFile(record); err != nil || strings.TrimSpace(string(b)) != first.Digest.String() {
		t.Fatalf("record after the rebuild: %q, %v", b, err)
	}
}
