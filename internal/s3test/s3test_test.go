package s3test_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// CI builds the gateway in scripts/install-deps.sh; the tests must look for
// the same version where that script put it.
func TestInstallDepsBuildsThePinnedVersion(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(airtest.ModuleRoot(t), "scripts", "install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSITYGW_VERSION="([^"]+)"`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/install-deps.sh sets no VERSITYGW_VERSION")
	}
	if string(m[1]) != s3test.Version {
		t.Fatalf("install-deps.sh builds versitygw %s, s3test.Version is %s", m[1], s3test.Version)
	}
	if !bytes.Contains(script, []byte("/var/cache/airlock-test/versitygw-")) {
		t.Fatal("install-deps.sh does not build into /var/cache/airlock-test/versitygw-<version>/ (s3test.CacheDir for root)")
	}
}

func TestGatewayLifecycle(t *testing.T) {
	g := s3test.Shared(t) // skips or fails as the package doc says; builds the binary if needed
	_ = g
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin, err := s3test.Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own, err := s3test.Start(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	bucket, err := own.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := own.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, bucket, "a/b", bytes.NewReader([]byte("hello")), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(own.ObjectPath(bucket, "a/b")); err != nil || string(data) != "hello" {
		t.Fatalf("object file: %q, %v", data, err)
	}
	obj, err := c.GetObject(ctx, bucket, "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || string(got) != "hello" {
		t.Fatalf("get: %q, %v", got, err)
	}
	dir := filepath.Dir(filepath.Dir(filepath.Dir(own.ObjectPath(bucket, "a/b"))))
	if err := own.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("gateway directory %s left after Stop: %v", dir, err)
	}
	if conn, err := net.DialTimeout("tcp", own.Endpoint(), time.Second); err == nil {
		conn.Close()
		t.Errorf("gateway still listens on %s after Stop", own.Endpoint())
	}
	if err := own.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
