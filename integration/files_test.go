package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// treeHashes maps every regular file under dir (relative path) to its
// SHA-256, and every symlink to its target.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			out[rel] = "-> " + l
			return err
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			sum := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(sum[:])
			return err
		case d.IsDir() && rel != ".":
			out[rel+"/"] = "dir"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFilesCLI copies a tree into a sandbox and back with `airlock cp`,
// checks it inside the sandbox, and drives `airlock fs`.
func TestFilesCLI(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 3*time.Minute)
			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{}).ID
			run := func(args ...string) string {
				t.Helper()
				stdout, stderr, code := s.cli(ctx, args...)
				if code != 0 {
					t.Fatalf("airlock %v: exit %d, stderr %q", args, code, stderr)
				}
				return stdout
			}

			// A local tree: text, 4 MiB of random bytes, an empty dir, a symlink.
			local := t.TempDir()
			src := filepath.Join(local, "src")
			big := make([]byte, 4<<20)
			_, _ = rand.NewChaCha8([32]byte{9}).Read(big)
			for name, data := range map[string][]byte{"a.txt": []byte("alpha\n"), "sub/big.bin": big} {
				p := filepath.Join(src, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("sub/big.bin", filepath.Join(src, "link")); err != nil {
				t.Fatal(err)
			}

			// In: a directory (tar) and a single file.
			run("cp", src, sb+":/work")
			run("cp", filepath.Join(src, "sub/big.bin"), sb+":/work/copy.bin")
			res := execIn(ctx, t, s.client(), model.SandboxID(sb), "sha256sum", "/work/sub/big.bin", "/work/copy.bin")
			sum := sha256.Sum256(big)
			if res.exitCode != 0 || strings.Count(res.stdout, hex.EncodeToString(sum[:])) != 2 {
				t.Fatalf("sha256sum in the sandbox: %+v, want %x twice", res, sum)
			}

			// Out: the directory, one file, one file to stdout.
			back := filepath.Join(local, "back")
			run("cp", sb+":/work", back)
			want := treeHashes(t, src)
			want["copy.bin"] = want["sub/big.bin"]
			got := treeHashes(t, back)
			if len(got) != len(want) {
				t.Errorf("copied back %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q after the round trip, want %q", k, got[k], v)
				}
			}
			run("cp", sb+":/work/sub/big.bin", filepath.Join(local, "big.out"))
			if b, err := os.ReadFile(filepath.Join(local, "big.out")); err != nil || sha256.Sum256(b) != sum {
				t.Fatalf("downloaded file differs (%v)", err)
			}
			if out := run("cp", sb+":/work/a.txt", "-"); out != "alpha\n" {
				t.Fatalf("cp to stdout: %q", out)
			}

			// airlock fs.
			if out := run("fs", "ls", sb, "/work"); !strings.Contains(out, "a.txt") || !strings.Contains(out, "link -> sub/big.bin") {
				t.Errorf("fs ls:\n%s", out)
			}
			var fi apiv1.FileInfo
			if err := json.Unmarshal([]byte(run("fs", "stat", "-o", "json", sb, "/work/sub/big.bin")), &fi); err != nil || fi.Size != int64(len(big)) || fi.Type != "file" {
				t.Fatalf("fs stat: %+v, %v", fi, err)
			}
			run("fs", "mkdir", sb, "/work/new/deep")
			run("fs", "mv", sb, "/work/a.txt", "/work/new/a.txt")
			if _, stderr, code := s.cli(ctx, "fs", "rm", sb, "/work/new"); code == 0 || !strings.Contains(stderr, "directory_not_empty") {
				t.Errorf("fs rm of a non-empty dir: exit %d, stderr %q", code, stderr)
			}
			run("fs", "rm", "-r", sb, "/work/new")
			if _, stderr, code := s.cli(ctx, "fs", "stat", sb, "/work/new"); code == 0 || !strings.Contains(stderr, "not_found") {
				t.Errorf("fs stat after rm -r: exit %d, stderr %q", code, stderr)
			}
			if _, stderr, code := s.cli(ctx, "fs", "stat", sb, "/work/../etc"); code != 2 || !strings.Contains(stderr, "clean") {
				t.Errorf("fs stat with ..: exit %d, stderr %q", code, stderr)
			}
			// The guest's /proc/self/root is a magic link: refused.
			if _, stderr, code := s.cli(ctx, "cp", sb+":/proc/self/root/etc/hostname", "-"); code == 0 || !strings.Contains(stderr, "invalid_path") {
				t.Errorf("cp through /proc/self/root: exit %d, stderr %q", code, stderr)
			}
		})
	}
}
