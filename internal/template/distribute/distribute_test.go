package distribute_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/blobstore/s3store"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/s3test"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/distribute"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// capValue is a revision 2 security.capability granting cap_net_raw.
var capValue = []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sourceTree writes a tree with what a template archive must carry: a
// hard link pair, a sparse file, a file capability and a user xattr, a
// directory xattr, a symlink, a setuid file owned by someone else.
func sourceTree(t *testing.T, variant string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (ownership, security.capability)")
	}
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "bin/tool"), []byte("#!/bin/sh\necho "+variant+"\n"), 0o755))
	must(t, os.Link(filepath.Join(dir, "bin/tool"), filepath.Join(dir, "bin/tool-alias")))
	must(t, unix.Setxattr(filepath.Join(dir, "bin/tool"), "security.capability", capValue, 0))
	must(t, unix.Setxattr(filepath.Join(dir, "bin/tool"), "user.origin", []byte("test"), 0))
	must(t, unix.Setxattr(filepath.Join(dir, "etc"), "user.dir", []byte("yes"), 0))
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	must(t, err)
	_, err = f.WriteAt([]byte("start"), 0)
	must(t, err)
	_, err = f.WriteAt([]byte("middle"), 32<<20)
	must(t, err)
	must(t, f.Truncate(64<<20))
	must(t, f.Close())
	must(t, os.Symlink("../bin/tool", filepath.Join(dir, "etc/tool-link")))
	must(t, os.WriteFile(filepath.Join(dir, "etc/suid"), []byte("x"), 0o644))
	must(t, os.Chown(filepath.Join(dir, "etc/suid"), 1000, 1000))
	must(t, os.Chmod(filepath.Join(dir, "etc/suid"), 0o755|os.ModeSetuid))
	return dir
}

func openTemplates(t *testing.T) *template.Store {
	t.Helper()
	s, err := template.Open(t.TempDir(), nil)
	must(t, err)
	return s
}

func newDistributor(t *testing.T, ts *template.Store, bs blobstore.Store) *distribute.Distributor {
	t.Helper()
	d, err := distribute.New(distribute.Config{Templates: ts, Blobs: bs, TempDir: t.TempDir()})
	must(t, err)
	return d
}

type harness struct {
	store  func(t *testing.T) blobstore.Store
	tamper func(t *testing.T, s blobstore.Store, d blobstore.Digest, content []byte)
}

func runSuite(t *testing.T, h harness) {
	t.Run("PushPull", func(t *testing.T) { testPushPull(t, h) })
	t.Run("CorruptArchiveRefused", func(t *testing.T) { testCorrupt(t, h, false) })
	t.Run("CorruptManifestRefused", func(t *testing.T) { testCorrupt(t, h, true) })
	t.Run("WrongArchiveRefused", func(t *testing.T) { testWrongArchive(t, h) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, h) })
}

func testPushPull(t *testing.T, h harness) {
	bs := h.store(t)
	a, b := openTemplates(t), openTemplates(t)
	imp, err := a.ImportDir(ctx(t), sourceTree(t, "one"), nil)
	must(t, err)
	da, db := newDistributor(t, a, bs), newDistributor(t, b, bs)
	archive, err := da.Publish(ctx(t), imp.Digest)
	must(t, err)
	again, err := da.Publish(ctx(t), imp.Digest)
	must(t, err)
	if again != archive {
		t.Errorf("second Publish: archive %s, first %s", again, archive)
	}
	got, err := db.Fetch(ctx(t), imp.Digest)
	must(t, err)
	if got.Digest != imp.Digest || got.Reused {
		t.Fatalf("Fetch = %+v, want %s freshly imported", got, imp.Digest)
	}
	must(t, b.Verify(ctx(t), imp.Digest))
	root := b.RootfsDir(imp.Digest)
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(root, "sparse.img"), &st))
	if st.Size != 64<<20 || st.Blocks*512 > 4<<20 {
		t.Errorf("sparse.img: %d bytes, %d allocated: holes not kept", st.Size, st.Blocks*512)
	}
	var l1, l2 unix.Stat_t
	must(t, unix.Stat(filepath.Join(root, "bin/tool"), &l1))
	must(t, unix.Stat(filepath.Join(root, "bin/tool-alias"), &l2))
	if l1.Ino != l2.Ino {
		t.Error("hard link not kept")
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(root, "bin/tool"), "security.capability", buf)
	if err != nil || !bytes.Equal(buf[:n], capValue) {
		t.Errorf("security.capability: %x, %v", buf[:max(n, 0)], err)
	}
	if again, err := db.Fetch(ctx(t), imp.Digest); err != nil || !again.Reused {
		t.Errorf("second Fetch = %+v, %v; want Reused", again, err)
	}
	// The archive is deterministic: another node publishing the same
	// stored tree makes the same archive.
	w1, w2 := new(bytes.Buffer), new(bytes.Buffer)
	must(t, a.WriteArchive(ctx(t), imp.Digest, w1))
	must(t, a.WriteArchive(ctx(t), imp.Digest, w2))
	if !bytes.Equal(w1.Bytes(), w2.Bytes()) || blobstore.FromBytes(w1.Bytes()) != archive {
		t.Error("WriteArchive is not deterministic")
	}
}

func testCorrupt(t *testing.T, h harness, manifest bool) {
	bs := h.store(t)
	a, b := openTemplates(t), openTemplates(t)
	imp, err := a.ImportDir(ctx(t), sourceTree(t, "two"), nil)
	must(t, err)
	archive, err := newDistributor(t, a, bs).Publish(ctx(t), imp.Digest)
	must(t, err)
	target := archive
	if manifest {
		target, _ = blobstore.FromTemplateDigest(imp.Digest)
	}
	info, err := bs.Stat(ctx(t), target)
	must(t, err)
	content := bytes.Repeat([]byte{'x'}, int(info.Size)) // same length, other bytes
	h.tamper(t, bs, target, content)
	_, err = newDistributor(t, b, bs).Fetch(ctx(t), imp.Digest)
	if !errors.Is(err, template.ErrCorrupt) {
		t.Fatalf("Fetch of a tampered blob: %v, want template.ErrCorrupt", err)
	}
	if b.Has(imp.Digest) {
		t.Error("the template was published from a corrupt blob")
	}
	if l, err := b.List(); err != nil || len(l) != 0 {
		t.Errorf("store after a refused pull: %v, %v; want empty", l, err)
	}
}

// A link that leads to the archive of another template is refused: the
// pulled tree must hash to the digest asked for.
func testWrongArchive(t *testing.T, h harness) {
	bs := h.store(t)
	a, b := openTemplates(t), openTemplates(t)
	one, err := a.ImportDir(ctx(t), sourceTree(t, "one"), nil)
	must(t, err)
	two, err := a.ImportDir(ctx(t), sourceTree(t, "two"), nil)
	must(t, err)
	da := newDistributor(t, a, bs)
	_, err = da.Publish(ctx(t), one.Digest)
	must(t, err)
	archiveTwo, err := da.Publish(ctx(t), two.Digest)
	must(t, err)
	md, _ := blobstore.FromTemplateDigest(one.Digest)
	must(t, bs.(blobstore.Linker).PutLink(ctx(t), distribute.ArchiveLink, md, archiveTwo))
	_, err = newDistributor(t, b, bs).Fetch(ctx(t), one.Digest)
	if !errors.Is(err, template.ErrCorrupt) {
		t.Fatalf("Fetch through a wrong link: %v, want template.ErrCorrupt", err)
	}
	if l, err := b.List(); err != nil || len(l) != 0 {
		t.Errorf("store after a refused pull: %v, %v; want empty", l, err)
	}
}

func testMissing(t *testing.T, h harness) {
	bs := h.store(t)
	d := newDistributor(t, openTemplates(t), bs)
	missing := model.TemplateDigest("sha256:" + string(bytes.Repeat([]byte("ab"), 32)))
	_, err := d.Fetch(ctx(t), missing)
	if !errors.Is(err, template.ErrNotFound) || !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Fetch of a missing template: %v, want ErrNotFound", err)
	}
	if _, err := d.Publish(ctx(t), missing); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("Publish of a template not in the local store: %v, want ErrNotFound", err)
	}
}

func TestDiskStore(t *testing.T) {
	runSuite(t, harness{
		store: func(t *testing.T) blobstore.Store {
			s, err := diskstore.Open(t.TempDir(), nil)
			must(t, err)
			return s
		},
		tamper: func(t *testing.T, s blobstore.Store, d blobstore.Digest, content []byte) {
			p := s.(*diskstore.Store).Path(d)
			must(t, os.Chmod(p, 0o600))
			must(t, os.WriteFile(p, content, 0o600))
		},
	})
}

func TestS3Store(t *testing.T) {
	gateways := map[*s3store.Store]*s3test.Gateway{}
	runSuite(t, harness{
		store: func(t *testing.T) blobstore.Store {
			g, bucket := s3test.Bucket(t)
			s, err := s3store.New(s3store.Config{
				Endpoint: g.URL, Bucket: bucket, Prefix: "airlock/", Region: s3test.Region,
				AccessKey: g.AccessKey, SecretKey: g.SecretKey, PathStyle: true,
				TrustedBuckets: []string{bucket},
			}, nil)
			must(t, err)
			gateways[s] = g
			return s
		},
		tamper: func(t *testing.T, bs blobstore.Store, d blobstore.Digest, content []byte) {
			s := bs.(*s3store.Store)
			must(t, os.WriteFile(gateways[s].ObjectPath(s.Bucket(), s.Key(d)), content, 0o644))
		},
	})
}
