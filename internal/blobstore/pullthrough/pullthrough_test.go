package pullthrough_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/blobstoretest"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/blobstore/pullthrough"
	"github.com/airlockdev/airlock/internal/blobstore/s3store"
	"github.com/airlockdev/airlock/internal/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// bucket is a fresh bucket on the shared gateway, for one test's nodes.
type bucket struct {
	g    *s3test.Gateway
	name string
}

func newBucket(t *testing.T) bucket {
	g, name := s3test.Bucket(t)
	return bucket{g, name}
}

func (b bucket) remote(t *testing.T) *s3store.Store {
	t.Helper()
	s, err := s3store.New(s3store.Config{
		Endpoint: b.g.URL, Bucket: b.name, Prefix: "airlock/", AccessKey: b.g.AccessKey, SecretKey: b.g.SecretKey,
		Region: s3test.Region, PathStyle: true, TrustedBuckets: []string{b.name},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// node is one node's pull-through store: its own disk, the shared bucket.
func (b bucket) node(t *testing.T, remote blobstore.Store) (*pullthrough.Store, *diskstore.Store) {
	t.Helper()
	local, err := diskstore.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if remote == nil {
		remote = b.remote(t)
	}
	return pullthrough.New(local, remote, nil), local
}

func TestConformance(t *testing.T) {
	blobstoretest.Run(t, blobstoretest.Harness{
		New: func(t *testing.T) blobstore.Store {
			s, _ := newBucket(t).node(t, nil)
			return s
		},
		// Open serves the local copy: tamper with that one.
		Tamper: func(t *testing.T, s blobstore.Store, d blobstore.Digest, content []byte) {
			local := s.(*pullthrough.Store).Local().(*diskstore.Store)
			if err := os.WriteFile(local.Path(d), content, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, s blobstore.Store) []string {
			pt := s.(*pullthrough.Store)
			left, err := pt.Local().(*diskstore.Store).Temps()
			if err != nil {
				t.Fatal(err)
			}
			uploads, err := pt.Remote().(*s3store.Store).IncompleteUploads(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return append(left, uploads...)
		},
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func read(t *testing.T, s blobstore.Store, d blobstore.Digest) ([]byte, error) {
	t.Helper()
	rc, _, err := s.Open(ctx(t), d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestPushOnPutPullOnOpen(t *testing.T) {
	b := newBucket(t)
	a, _ := b.node(t, nil)
	other, otherLocal := b.node(t, nil)
	data := bytes.Repeat([]byte("template layer "), 100_000)
	d := blobstore.FromBytes(data)
	if err := a.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Remote().Stat(ctx(t), d); err != nil {
		t.Fatalf("not pushed: %v", err)
	}
	if _, err := otherLocal.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the other node has it before asking: %v", err)
	}
	if info, err := other.Stat(ctx(t), d); err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Stat on the other node (remote): %+v, %v", info, err)
	}
	got, err := read(t, other, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Open on the other node: %v", err)
	}
	if _, err := otherLocal.Stat(ctx(t), d); err != nil {
		t.Fatalf("not cached after the pull: %v", err)
	}
	if err := other.Evict(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Remote().Stat(ctx(t), d); err != nil {
		t.Fatalf("Evict removed the remote copy: %v", err)
	}
}

// A corrupt object in the bucket is refused at the pull and never cached.
func TestCorruptRemoteNotCached(t *testing.T) {
	b := newBucket(t)
	a, _ := b.node(t, nil)
	other, otherLocal := b.node(t, nil)
	data := bytes.Repeat([]byte{7}, 3<<20)
	d := blobstore.FromBytes(data)
	if err := a.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rs := a.Remote().(*s3store.Store)
	bad := bytes.Clone(data)
	bad[1<<20] = 8
	if err := os.WriteFile(b.g.ObjectPath(rs.Bucket(), rs.Key(d)), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, other, d); !errors.Is(err, blobstore.ErrCorrupt) {
		t.Fatalf("Open of a corrupt remote blob: %v, want ErrCorrupt", err)
	}
	if _, err := otherLocal.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("corrupt blob cached: %v", err)
	}
	if temps, _ := otherLocal.Temps(); len(temps) > 0 {
		t.Fatalf("left %v", temps)
	}
}

// A local copy that rots is refused, taken out of service, and pulled again
// intact at the next Open.
func TestCorruptLocalPulledAgain(t *testing.T) {
	b := newBucket(t)
	n, local := b.node(t, nil)
	data := bytes.Repeat([]byte{1, 2, 3}, 1<<20)
	d := blobstore.FromBytes(data)
	if err := n.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local.Path(d), data[1:], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, n, d); !errors.Is(err, blobstore.ErrCorrupt) {
		t.Fatalf("first Open: %v, want ErrCorrupt", err)
	}
	got, err := read(t, n, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("second Open: %v", err)
	}
}

// A corrupt local copy is never pushed.
func TestCorruptLocalNotPushed(t *testing.T) {
	b := newBucket(t)
	remote := b.remote(t)
	local, err := diskstore.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{9}, 1000)
	d := blobstore.FromBytes(data)
	if err := local.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[0] = 0
	if err := os.WriteFile(local.Path(d), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	n := pullthrough.New(local, remote, nil)
	if err := n.Push(ctx(t), d); !errors.Is(err, blobstore.ErrCorrupt) {
		t.Fatalf("Push of a corrupt local blob: %v, want ErrCorrupt", err)
	}
	if _, err := remote.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("corrupt blob pushed: %v", err)
	}
}

// countingStore counts Opens of the remote.
type countingStore struct {
	blobstore.Store
	opens atomic.Int32
}

func (c *countingStore) Open(ctx context.Context, d blobstore.Digest) (io.ReadCloser, int64, error) {
	c.opens.Add(1)
	return c.Store.Open(ctx, d)
}

func TestConcurrentOpensPullOnce(t *testing.T) {
	b := newBucket(t)
	a, _ := b.node(t, nil)
	data := bytes.Repeat([]byte("x"), 8<<20)
	d := blobstore.FromBytes(data)
	if err := a.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	remote := &countingStore{Store: b.remote(t)}
	other, _ := b.node(t, remote)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			got, err := read(t, other, d)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := remote.opens.Load(); got != 1 {
		t.Errorf("%d concurrent Opens pulled %d times, want 1", n, got)
	}
}

// unreachableRemote fails every call, as a remote behind a broken network.
type unreachableRemote struct{ blobstore.Store }

var errDown = errors.New("remote unreachable")

func (unreachableRemote) Stat(context.Context, blobstore.Digest) (blobstore.Info, error) {
	return blobstore.Info{}, errDown
}

// A failed push leaves the blob local (Put reports it); List still shows it.
func TestPushFailureKeepsLocal(t *testing.T) {
	b := newBucket(t)
	local, err := diskstore.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := pullthrough.New(local, unreachableRemote{b.remote(t)}, nil)
	data := []byte("only here")
	d := blobstore.FromBytes(data)
	if err := n.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); !errors.Is(err, errDown) {
		t.Fatalf("Put with the remote down: %v", err)
	}
	if got, err := read(t, n, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("local copy: %v", err)
	}
	found := false
	for info, err := range n.List(ctx(t)) {
		if err != nil {
			t.Fatal(err)
		}
		found = found || info.Digest == d
	}
	if !found {
		t.Fatal("List misses the unpushed blob")
	}
}
