package snapblob_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/snapblob"
)

// snapshotTree makes a tree with what a runtime's snapshot holds: an
// upper layer with a whiteout, an opaque directory, owners of an id range,
// setuid, a hard link, a symlink, a fifo and a socket; a sparse disk image;
// a checkpoint file.
func snapshotTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snp")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "upper/etc/opaque"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "snapshot.json"), []byte(`{"format":"x"}`), 0o600))
	must(os.WriteFile(filepath.Join(dir, "upper/etc/hello"), []byte("hello from A\n"), 0o644))
	must(unix.Setxattr(filepath.Join(dir, "upper/etc/hello"), "user.origin", []byte("node-a\x00bin"), 0))
	must(unix.Setxattr(filepath.Join(dir, "upper/etc/opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	must(os.Link(filepath.Join(dir, "upper/etc/hello"), filepath.Join(dir, "upper/etc/hello-again")))
	must(os.Symlink("../../outside", filepath.Join(dir, "upper/etc/link")))
	must(unix.Mknod(filepath.Join(dir, "upper/etc/gone"), unix.S_IFCHR|0o000, 0)) // an overlay whiteout
	must(unix.Mkfifo(filepath.Join(dir, "upper/etc/fifo"), 0o620))
	must(os.WriteFile(filepath.Join(dir, "upper/etc/suid"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Lchown(filepath.Join(dir, "upper/etc/suid"), 1342177280, 1342177281))
	must(os.Chmod(filepath.Join(dir, "upper/etc/suid"), 0o4755))
	must(os.Lchown(filepath.Join(dir, "upper/etc/link"), 1342177282, 1342177282))
	// Sparse: data at 0 and at 15 MiB of 20 MiB.
	img, err := os.Create(filepath.Join(dir, "disk.img"))
	must(err)
	_, err = img.WriteAt([]byte("superblock"), 0)
	must(err)
	_, err = img.WriteAt(bytes.Repeat([]byte{7}, 100000), 15<<20)
	must(err)
	must(img.Truncate(20 << 20))
	must(img.Close())
	rnd := make([]byte, 3<<20)
	for i := range rnd {
		rnd[i] = byte(i*7919 + i/4096)
	}
	must(os.WriteFile(filepath.Join(dir, "checkpoint/pages.img"), rnd, 0o600))
	l, err := net.Listen("unix", filepath.Join(dir, "upper/etc/sock"))
	must(err)
	t.Cleanup(func() { l.Close() })
	return dir
}

// describe lists a tree's entries with what must survive a push and pull.
func describe(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s mode=%o uid=%d gid=%d rdev=%d nlink=%d", rel, st.Mode, st.Uid, st.Gid, st.Rdev, st.Nlink)
		if rel != "." {
			line += fmt.Sprintf(" mtime=%d", st.Mtim.Nano())
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" size=%d sum=%s", len(b), blobstore.FromBytes(b))
		case unix.S_IFLNK:
			target, _ := os.Readlink(path)
			line += " -> " + target
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			buf := make([]byte, 4096)
			n, _ := unix.Llistxattr(path, buf)
			names := strings.Split(strings.Trim(string(buf[:n]), "\x00"), "\x00")
			slices.Sort(names)
			for _, name := range names {
				if name == "" {
					continue
				}
				v := make([]byte, 4096)
				m, _ := unix.Lgetxattr(path, name, v)
				line += fmt.Sprintf(" %s=%q", name, v[:m])
			}
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type claims struct{ got []model.BlobDigest }

func (c *claims) claim(_ context.Context, d []model.BlobDigest) error {
	c.got = append([]model.BlobDigest(nil), d...)
	return nil
}

func openStore(t *testing.T) (*diskstore.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := diskstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func TestPushPullRoundTrip(t *testing.T) {
	airtest.RequireRoot(t) // owners, devices, trusted.* attributes
	ctx := context.Background()
	src := snapshotTree(t)
	blobs, _ := openStore(t)
	var c claims
	md, st, err := snapblob.Push(ctx, blobs, src, c.claim, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 20 MiB of image with ~100 kB of data, 3 MiB of checkpoint: the
	// image's holes are not in the stream.
	if st.Bytes > 4<<20 || st.Bytes < 3<<20 {
		t.Errorf("push stats %+v: want the checkpoint and the image's data only", st)
	}
	if len(c.got) != st.Chunks+1 || c.got[0] != model.BlobDigest(md.String()) {
		t.Errorf("claimed %d digests (first %s), want the manifest %s and %d chunks", len(c.got), c.got[0], md, st.Chunks)
	}
	// Pushed again: every chunk reused, the same manifest.
	md2, st2, err := snapblob.Push(ctx, blobs, src, c.claim, nil)
	if err != nil || md2 != md || st2.Written != 0 {
		t.Fatalf("second push: %s %+v %v, want %s with nothing written", md2, st2, err, md)
	}

	dst := filepath.Join(t.TempDir(), "pulled")
	if _, err := snapblob.Pull(ctx, blobs, md, dst, nil); err != nil {
		t.Fatal(err)
	}
	want, got := describe(t, src), describe(t, dst)
	for i := range want {
		if strings.Contains(want[i], "etc/sock") {
			want = slices.Delete(want, i, i+1)
			break
		}
	}
	if !slices.Equal(want, got) {
		t.Fatalf("pulled tree differs:\nwant %s\ngot  %s", strings.Join(want, "\n     "), strings.Join(got, "\n     "))
	}
	var img unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "disk.img"), &img); err != nil {
		t.Fatal(err)
	}
	if img.Blocks*512 > 4<<20 {
		t.Errorf("pulled disk.img uses %d bytes of disk: holes were filled", img.Blocks*512)
	}
}

// Every kind of damage to the stored blobs is refused as corrupt, and the
// pull leaves nothing.
func TestPullRefusesTamperedBlobs(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "snp")
	if err := os.MkdirAll(filepath.Join(src, "upper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "upper/f"), bytes.Repeat([]byte("data"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, s *diskstore.Store, dir string, md blobstore.Digest, chunks []model.BlobDigest)
		want   error
	}{
		{"ChunkFlipped", func(t *testing.T, _ *diskstore.Store, dir string, _ blobstore.Digest, chunks []model.BlobDigest) {
			flip(t, blobPath(dir, string(chunks[2])))
		}, snapblob.ErrCorrupt},
		{"ManifestFlipped", func(t *testing.T, _ *diskstore.Store, dir string, md blobstore.Digest, _ []model.BlobDigest) {
			flip(t, blobPath(dir, md.String()))
		}, snapblob.ErrCorrupt},
		{"ChunkMissing", func(t *testing.T, s *diskstore.Store, _ string, _ blobstore.Digest, chunks []model.BlobDigest) {
			d, _ := blobstore.ParseDigest(string(chunks[len(chunks)-1]))
			if err := s.Delete(ctx, d); err != nil {
				t.Fatal(err)
			}
		}, blobstore.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			blobs, dir := openStore(t)
			var c claims
			md, _, err := snapblob.Push(ctx, blobs, src, c.claim, nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, blobs, dir, md, c.got)
			dst := filepath.Join(t.TempDir(), "pulled")
			_, err = snapblob.Pull(ctx, blobs, md, dst, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("pull of damaged blobs: %v, want %v", err, tc.want)
			}
			if _, serr := os.Lstat(dst); !errors.Is(serr, fs.ErrNotExist) {
				t.Fatalf("a failed pull left %s (%v)", dst, serr)
			}
		})
	}
}

// A push whose claim is refused (a blob being deleted) is an error the
// caller retries.
func TestPushClaimRefused(t *testing.T) {
	blobs, _ := openStore(t)
	src := t.TempDir()
	boom := errors.New("busy")
	_, _, err := snapblob.Push(context.Background(), blobs, src, func(context.Context, []model.BlobDigest) error { return boom }, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("push with a refused claim: %v", err)
	}
}

func blobPath(dir, digest string) string {
	h := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(dir, "blobs", "sha256", h[:2], h)
}

func flip(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A sparse record that does not describe the entry's content is refused,
// and nothing is left.
func TestPullRefusesBadSparseRecords(t *testing.T) {
	for _, rec := range []string{"10;0+5,3+2", "10;8+5", "x;0+1", "10;0+0", "10;-1+2", "10;0+4", "-1;", "10;0+5,", "9223372036854775807;9223372036854775806+5"} {
		t.Run(rec, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}))
			must(tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5, Format: tar.FormatPAX,
				PAXRecords: map[string]string{"AIRLOCK.sparse": rec}}))
			_, err := tw.Write([]byte("hello"))
			must(err)
			must(tw.Close())
			blobs, _ := openStore(t)
			md := pushStream(t, blobs, buf.Bytes())
			dst := filepath.Join(t.TempDir(), "pulled")
			if _, err := snapblob.Pull(context.Background(), blobs, md, dst, nil); !errors.Is(err, snapblob.ErrCorrupt) {
				t.Fatalf("pull with sparse record %q: %v, want ErrCorrupt", rec, err)
			}
			if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("left %s", dst)
			}
		})
	}
}

// A stream that names entries outside the snapshot, or through a
// symlink, is refused.
func TestPullRefusesEscapes(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"DotDot":       {{Name: "../evil", Typeflag: tar.TypeReg}},
		"Absolute":     {{Name: "/etc/evil", Typeflag: tar.TypeReg}},
		"ThroughLink":  {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "l/evil", Typeflag: tar.TypeReg}},
		"HardlinkOut":  {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}},
		"NoParent":     {{Name: "a/b", Typeflag: tar.TypeReg}},
		"SecondRoot":   {{Name: "./", Typeflag: tar.TypeDir}},
		"LinkToADir":   {{Name: "d/", Typeflag: tar.TypeDir}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "d"}},
		"DuplicateDir": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/", Typeflag: tar.TypeDir}},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				t.Fatal(err)
			}
			for _, h := range entries {
				h.Mode, h.Format = 0o644, tar.FormatPAX
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			blobs, _ := openStore(t)
			md := pushStream(t, blobs, buf.Bytes())
			parent := t.TempDir()
			dst := filepath.Join(parent, "pulled")
			if _, err := snapblob.Pull(context.Background(), blobs, md, dst, nil); err == nil {
				t.Fatal("pull of an escaping stream succeeded")
			}
			if left, _ := os.ReadDir(parent); len(left) != 0 {
				t.Fatalf("left %v beside the pull", left)
			}
			if _, err := os.Lstat("/etc/evil"); err == nil {
				t.Fatal("/etc/evil was written")
			}
		})
	}
}

// pushStream stores a raw stream as one chunk and its manifest, as Push
// would, and returns the manifest's digest.
func pushStream(t *testing.T, blobs blobstore.Store, stream []byte) blobstore.Digest {
	t.Helper()
	ctx := context.Background()
	chunk := append([]byte("airlock-snapshot-chunk/1\n"), stream...)
	cd := blobstore.FromBytes(chunk)
	if err := blobs.Put(ctx, cd, bytes.NewReader(chunk), int64(len(chunk))); err != nil {
		t.Fatal(err)
	}
	m := fmt.Sprintf(`airlock-snapshot-manifest/1
{"format":"airlock-snapshot-tar/1","size":%d,"chunks":[{"digest":%q,"size":%d}]}`, len(stream), cd, len(chunk))
	md := blobstore.FromBytes([]byte(m))
	if err := blobs.Put(ctx, md, strings.NewReader(m), int64(len(m))); err != nil {
		t.Fatal(err)
	}
	return md
}

// failingStore fails every Put after the first `ok` ones.
type failingStore struct {
	blobstore.Store
	ok int
}

func (f *failingStore) Put(ctx context.Context, d blobstore.Digest, r io.Reader, size int64) error {
	if f.ok == 0 {
		return errors.New("the blob store went away")
	}
	f.ok--
	return f.Store.Put(ctx, d, r, size)
}

// A push cut short (the store failed after one chunk: what a crash
// leaves) claims nothing; the retry reuses what was written and finishes.
func TestPushRetriedAfterAFailure(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "snp")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 10<<20)
	for i := range data {
		data[i] = byte(i % 251)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	blobs, _ := openStore(t)
	var c claims
	if _, _, err := snapblob.Push(ctx, &failingStore{Store: blobs, ok: 1}, src, c.claim, nil); err == nil {
		t.Fatal("a push whose store failed succeeded")
	}
	if c.got != nil {
		t.Fatalf("a failed push claimed %v", c.got)
	}
	md, st, err := snapblob.Push(ctx, blobs, src, c.claim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reused != 1 || st.Chunks != 3 {
		t.Fatalf("retried push %+v: want the chunk written before the failure reused", st)
	}
	dst := filepath.Join(t.TempDir(), "pulled")
	if _, err := snapblob.Pull(ctx, blobs, md, dst, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pulled file differs (%v)", err)
	}
}
