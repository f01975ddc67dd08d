package s3test_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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
	if !bytes.Contains(script, []byte(`"${AIRLOCK_TEST_CACHE:-/var/cache/airlock-test}/versitygw-$VERSITYGW_VERSION"`)) {
		t.Fatal("install-deps.sh does not build into $AIRLOCK_TEST_CACHE (default /var/cache/airlock-test)/versitygw-<version>/ (airtest.TestCache for root)")
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
	dir := own.Dir()
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

// A gateway started by a test process that is then SIGKILLed is stopped
// and removed by its watchdog.
func TestWatchdogStopsGatewayWhenProcessDies(t *testing.T) {
	if os.Getenv("S3TEST_CHILD") == "1" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bin, err := s3test.Binary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g, err := s3test.Start(ctx, bin)
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("GATEWAY " + g.Dir() + " " + g.Endpoint() + "\n")
		time.Sleep(time.Minute) // killed long before
		return
	}
	s3test.Shared(t) // skips (or fails under CI) as the others do when there is no binary
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogStopsGatewayWhenProcessDies$", "-test.v")
	cmd.Env = append(os.Environ(), "S3TEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir, endpoint string
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "GATEWAY" {
			dir, endpoint = f[1], f[2]
			break
		}
		seen = append(seen, sc.Text())
	}
	if dir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not report its gateway; output:\n%s", strings.Join(seen, "\n"))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if conn, err := net.DialTimeout("tcp", endpoint, time.Second); err == nil {
				conn.Close()
				t.Fatal("gateway dir removed but the gateway still listens")
			}
			return
		}
	}
	t.Fatalf("gateway dir %s still exists 30s after its process was killed", dir)
}

// Without a module proxy the build fails with ErrUnavailable and says why.
func TestBuildWithoutModuleProxyIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go install")
	}
	t.Setenv("AIRLOCK_TEST_CACHE", t.TempDir())
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOMODCACHE", t.TempDir()) // nothing cached to build from
	t.Setenv("GOFLAGS", "-modcacherw")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s3test.Binary(ctx)
	if !errors.Is(err, s3test.ErrUnavailable) || !strings.Contains(err.Error(), "module proxy") {
		t.Fatalf("Binary without a module proxy: %v", err)
	}
	t.Log(err)
}

// An unavailable gateway skips the test, except under CI=true, where it
// fails it: CI must run what it can.
func TestUnavailableSkipsOrFailsUnderCI(t *testing.T) {
	if os.Getenv("S3TEST_CHILD") == "unavailable" {
		s3test.Shared(t)
		t.Log("REACHED")
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP"},
		{"true", true, "CI=true and the S3 test gateway is unavailable"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableSkipsOrFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "S3TEST_CHILD=unavailable", "AIRLOCK_VERSITYGW=/nonexistent/versitygw", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "REACHED") {
			t.Errorf("CI=%q: exit %v, output:\n%s", tc.ci, err, out)
		}
	}
}
