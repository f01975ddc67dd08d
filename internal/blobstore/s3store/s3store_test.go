package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/blobstoretest"
	"github.com/airlockdev/airlock/internal/blobstore/s3store"
	"github.com/airlockdev/airlock/internal/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// newStore returns a store on a fresh bucket of the shared test gateway.
func newStore(t *testing.T, prefix string) (*s3store.Store, *s3test.Gateway) {
	t.Helper()
	g, bucket := s3test.Bucket(t)
	s, err := s3store.New(s3store.Config{
		Endpoint:       g.URL,
		Bucket:         bucket,
		Prefix:         prefix,
		AccessKey:      g.AccessKey,
		SecretKey:      g.SecretKey,
		Region:         s3test.Region,
		PathStyle:      true,
		TrustedBuckets: []string{"other", bucket},
		PartSize:       s3store.MinPartSize, // many parts out of small blobs
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	return s, g
}

func TestConformance(t *testing.T) {
	gateways := map[*s3store.Store]*s3test.Gateway{}
	blobstoretest.Run(t, blobstoretest.Harness{
		New: func(t *testing.T) blobstore.Store {
			s, g := newStore(t, "node-a/")
			gateways[s] = g
			return s
		},
		// Rewrite the object's file in the gateway's posix backend: bit rot
		// or a careless operator, behind the S3 API.
		Tamper: func(t *testing.T, bs blobstore.Store, d blobstore.Digest, content []byte) {
			s := bs.(*s3store.Store)
			path := gateways[s].ObjectPath(s.Bucket(), s.Key(d))
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("object file of %s: %v", d, err)
			}
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, bs blobstore.Store) []string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			keys, err := bs.(*s3store.Store).IncompleteUploads(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// The server, not only the client, checks that each request's payload
// hashes to the SHA-256 that Put computed: bytes that change on the way are
// refused.
func TestServerRefusesPayloadNotMatchingItsSHA256(t *testing.T) {
	s, g := newStore(t, "")
	c, err := g.Client()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("the real bytes")
	wrong := blobstore.FromBytes([]byte("other bytes"))
	core := minio.Core{Client: c}
	_, err = core.PutObject(ctx(t), s.Bucket(), s.Key(wrong), bytes.NewReader(data), int64(len(data)), "", wrong.Hex(), minio.PutObjectOptions{DisableContentSha256: true})
	if err == nil {
		t.Fatal("the gateway accepted a payload that does not hash to its x-amz-content-sha256")
	}
	if _, err := s.Stat(ctx(t), wrong); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Stat after the refused PUT: %v", err)
	}
}

// An object whose metadata names another digest (copied or renamed by hand)
// is refused at Open.
func TestMetadataOfAnotherDigestIsCorrupt(t *testing.T) {
	s, g := newStore(t, "")
	c, err := g.Client()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("content")
	d := blobstore.FromBytes(data)
	_, err = c.PutObject(ctx(t), s.Bucket(), s.Key(d), bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{UserMetadata: map[string]string{"Airlock-Digest": blobstore.FromBytes(nil).String()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(ctx(t), d); !errors.Is(err, blobstore.ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
}

// A blob pushed by another tool (no metadata) is served if its content
// matches its key.
func TestObjectWithoutMetadataIsVerifiedByContent(t *testing.T) {
	s, g := newStore(t, "")
	c, err := g.Client()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("pushed by another tool")
	d := blobstore.FromBytes(data)
	if _, err := c.PutObject(ctx(t), s.Bucket(), s.Key(d), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(ctx(t), d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %q, %v", got, err)
	}
}

// The object carries its digest as metadata, for people and tools looking
// at the bucket.
func TestPutStoresDigestAsMetadata(t *testing.T) {
	s, g := newStore(t, "pfx")
	c, err := g.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{100, 11 << 20} { // one PUT; multipart
		data := bytes.Repeat([]byte{byte(n)}, n)
		d := blobstore.FromBytes(data)
		if err := s.Put(ctx(t), d, bytes.NewReader(data), int64(n)); err != nil {
			t.Fatal(err)
		}
		if want := "pfx/blobs/sha256/" + d.Hex(); s.Key(d) != want {
			t.Fatalf("key %q, want %q", s.Key(d), want)
		}
		info, err := c.StatObject(ctx(t), s.Bucket(), s.Key(d), minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := info.UserMetadata["Airlock-Digest"]; got != d.String() || info.Size != int64(n) {
			t.Fatalf("%d bytes: metadata %q, size %d", n, got, info.Size)
		}
	}
}

// Two stores on one bucket under different prefixes do not see each other.
func TestPrefixesSeparate(t *testing.T) {
	a, g := newStore(t, "a/")
	b, err := s3store.New(s3store.Config{
		Endpoint: g.URL, Bucket: a.Bucket(), Prefix: "b/", AccessKey: g.AccessKey, SecretKey: g.SecretKey,
		TrustedBuckets: []string{a.Bucket()},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("in a")
	d := blobstore.FromBytes(data)
	if err := a.Put(ctx(t), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("b sees a's blob: %v", err)
	}
	for info, err := range b.List(ctx(t)) {
		t.Fatalf("b lists %v, %v", info, err)
	}
}
