package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/blobstore/s3store"
	"github.com/airlockdev/airlock/internal/s3test"
)

func TestOpenBlobStoreFile(t *testing.T) {
	ctx := context.Background()
	if bs, err := openBlobStore(ctx, Options{}, discardLogger()); err != nil || bs != nil {
		t.Fatalf("no --blob-store: %v, %v; want none", bs, err)
	}
	dir := t.TempDir()
	bs, err := openBlobStore(ctx, Options{BlobStore: "file://" + dir}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if ds, ok := bs.(*diskstore.Store); !ok || ds.Dir() != dir {
		t.Fatalf("file://%s opened %T", dir, bs)
	}
	if _, ok := bs.(blobstore.Linker); !ok {
		t.Fatal("the disk store keeps no links")
	}
	for _, bad := range []string{"file://relative/dir", "file:///x?y=1", "http://x", "s3://b"} {
		if _, err := openBlobStore(ctx, Options{BlobStore: bad}, discardLogger()); err == nil {
			t.Errorf("--blob-store %q accepted", bad)
		}
	}
}

func TestOpenBlobStoreS3(t *testing.T) {
	g, bucket := s3test.Bucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "s3://" + bucket + "/airlock?endpoint=" + g.URL + "&region=" + s3test.Region + "&path_style=true"
	t.Setenv("AWS_ACCESS_KEY_ID", g.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", g.SecretKey)
	if _, err := openBlobStore(ctx, Options{BlobStore: url}, discardLogger()); !errors.Is(err, s3store.ErrUntrustedBucket) {
		t.Fatalf("a bucket off --trusted-bucket: %v, want ErrUntrustedBucket", err)
	}
	bs, err := openBlobStore(ctx, Options{BlobStore: url, TrustedBuckets: []string{bucket}}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	d := blobstore.FromBytes([]byte("x"))
	if _, err := bs.Stat(ctx, d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Stat on the new bucket: %v", err)
	}

	// Credentials from a file instead; the environment's are ignored then.
	t.Setenv("AWS_ACCESS_KEY_ID", "wrong")
	creds := filepath.Join(t.TempDir(), "creds")
	content := "# test gateway\nAWS_ACCESS_KEY_ID=" + g.AccessKey + "\nAWS_SECRET_ACCESS_KEY=" + g.SecretKey + "\n"
	if err := os.WriteFile(creds, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{BlobStore: url, TrustedBuckets: []string{bucket}, BlobStoreCredentials: creds}
	if _, err := openBlobStore(ctx, opts, discardLogger()); err == nil {
		t.Fatal("a credentials file readable by others was accepted")
	}
	if err := os.Chmod(creds, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openBlobStore(ctx, opts, discardLogger()); err != nil {
		t.Fatal(err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestMain(m *testing.M) { s3test.Main(m) }
