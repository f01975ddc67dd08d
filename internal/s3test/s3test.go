// Package s3test runs a throwaway S3-compatible server for tests: versitygw
// (github.com/versity/versitygw) with its posix backend in a temporary
// directory, listening on a free port of 127.0.0.1.
//
// The gateway binary is built from the Go module proxy at a pinned version
// (Version) and cached by version, so only the first use on a machine pays
// for the build (about two minutes): scripts/install-deps.sh builds it into
// the cache, and Binary builds it on first use where that did not happen.
// The cache is $AIRLOCK_TEST_CACHE, else /var/cache/airlock-test when
// running as root (as CI does), else the user's cache directory plus
// /airlock-test; the binary is <cache>/versitygw-<Version>/versitygw.
// $AIRLOCK_VERSITYGW names a binary to use instead.
//
// Bucket(t) is the usual entry point: the first call in a test process
// starts one shared gateway, each call creates a fresh bucket on it. The
// gateway is stopped and its files removed when the test process ends: by
// Main (wrap TestMain with it) or, after a crash or SIGKILL, by a watchdog
// process that notices the test process is gone — it holds the read end of
// a pipe whose only writer is the test process, as internal/pgtest's does.
//
// When the binary cannot be had (no go command, no module proxy), tests
// skip with a message saying so, except under CI=true, where they fail:
// CI installs what the suite needs and must not skip it.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// Module is the versitygw command's package path; Version is the pinned
// version (keep scripts/install-deps.sh's VERSITYGW_VERSION equal to it).
const (
	Module  = "github.com/versity/versitygw/cmd/versitygw"
	Version = "v1.8.0"
)

// Region is the gateway's region.
const Region = "us-east-1"

// ErrUnavailable is wrapped when the gateway binary cannot be found or
// built; tests skip on it (fail under CI=true).
var ErrUnavailable = errors.New("S3 test gateway (versitygw) unavailable")

// BinaryPath returns where the cached binary of Version lives.
func BinaryPath() (string, error) {
	dir, err := airtest.TestCache()
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	return filepath.Join(dir, "versitygw-"+Version, "versitygw"), nil
}

// Binary returns the path of a versitygw binary of Version, building it
// into the cache if it is not there yet. Concurrent callers (several test
// processes) build it once: the build holds a lock file next to the binary.
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv("AIRLOCK_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: $AIRLOCK_VERSITYGW: %v", ErrUnavailable, err)
		}
		return p, nil
	}
	bin, err := BinaryPath()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if isExecutable(bin) {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("%w: lock %s: %v", ErrUnavailable, lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if isExecutable(bin) { // another process built it while we waited
		return bin, nil
	}
	if err := build(ctx, dir); err != nil {
		return "", err
	}
	return bin, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// build runs `go install Module@Version` into a fresh directory inside dir
// and renames the result into place, so the binary appears only complete.
func build(ctx context.Context, dir string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		if _, err2 := os.Stat("/usr/local/go/bin/go"); err2 != nil {
			return fmt.Errorf("%w: no go command to build %s@%s with: %v", ErrUnavailable, Module, Version, err)
		}
		goCmd = "/usr/local/go/bin/go"
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goCmd, "install", Module+"@"+Version)
	cmd.Dir = tmp // outside any module: go install pkg@version ignores go.mod anyway
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// From the machine's network namespace: a package isolated by
	// netnstest.Main has no route to the module proxy.
	if err := netnstest.InHost(cmd.Run); err != nil {
		return fmt.Errorf("%w: go install %s@%s failed (is the Go module proxy reachable?): %v\n%s",
			ErrUnavailable, Module, Version, err, strings.TrimSpace(out.String()))
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), filepath.Join(dir, "versitygw")); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	fmt.Fprintf(os.Stderr, "s3test: built %s@%s in %v into %s\n", Module, Version, time.Since(start).Round(time.Second), dir)
	return nil
}

// Gateway is a running versitygw.
type Gateway struct {
	URL       string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	dir     string // root: data/ (the posix backend: one directory per bucket) and gateway.log
	watch   *exec.Cmd
	pipe    *os.File // write end of the watchdog's stdin; closing it stops the gateway
	stopMu  sync.Mutex
	stopped bool
	stopErr error
}

// watchdogScript starts the gateway, waits for EOF on stdin (the test
// process closed the pipe or died), then stops it and removes its files.
// $1 is the gateway's root directory, the rest its command line.
const watchdogScript = `dir=$1; shift
"$@" >"$dir/gateway.log" 2>&1 &
gw=$!
cat >/dev/null
kill "$gw" 2>/dev/null
wait "$gw"
rm -rf "$dir"
exit 0`

// Start starts a gateway from the binary bin on a free port of 127.0.0.1,
// with fresh random credentials and an empty temporary directory, and waits
// until it answers.
func Start(ctx context.Context, bin string) (*Gateway, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		g, err := start(ctx, bin)
		if err == nil {
			return g, nil
		}
		lastErr = err // most likely someone took the port meanwhile
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string) (*Gateway, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("s3test: free port: %w", err)
	}
	dir, err := os.MkdirTemp("", "airlock-s3test-")
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("s3test: %w", err)
	}
	g := &Gateway{
		URL:       "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "test" + randomHex(8),
		SecretKey: randomHex(20),
		dir:       dir,
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("s3test: pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "s3test-watchdog", dir,
		bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "--region", Region, "--quiet",
		"posix", filepath.Join(dir, "data"))
	// Credentials through the environment, not the command line.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+g.AccessKey, "ROOT_SECRET_ACCESS_KEY="+g.SecretKey)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // signals aimed at the test's group do not reach it
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("s3test: start watchdog: %w", err)
	}
	r.Close() // only the watchdog holds the read end now
	g.watch, g.pipe = cmd, w
	if err := g.waitReady(ctx, 30*time.Second); err != nil {
		logData, _ := os.ReadFile(filepath.Join(dir, "gateway.log"))
		_ = g.Stop()
		return nil, fmt.Errorf("s3test: versitygw on %s did not come up: %w\n%s", g.URL, err, strings.TrimSpace(string(logData)))
	}
	return g, nil
}

func (g *Gateway) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil // any answer (403 without credentials) means it serves
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Dir returns the gateway's root directory (removed when it stops).
func (g *Gateway) Dir() string { return g.dir }

// Endpoint returns the gateway's host:port.
func (g *Gateway) Endpoint() string { return strings.TrimPrefix(g.URL, "http://") }

// ObjectPath returns the file in which the posix backend keeps key of
// bucket, for tests that tamper with stored bytes behind the S3 API.
func (g *Gateway) ObjectPath(bucket, key string) string {
	return filepath.Join(g.dir, "data", bucket, filepath.FromSlash(key))
}

// Client returns a minio-go client with the gateway's root credentials.
func (g *Gateway) Client() (*minio.Client, error) {
	return minio.New(g.Endpoint(), &minio.Options{
		Creds:        credentials.NewStaticV4(g.AccessKey, g.SecretKey, ""),
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
	})
}

// CreateBucket creates a bucket with a fresh random name and returns it.
func (g *Gateway) CreateBucket(ctx context.Context) (string, error) {
	c, err := g.Client()
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	name := "airlock-test-" + randomHex(6)
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		return "", fmt.Errorf("s3test: create bucket %s: %w", name, err)
	}
	return name, nil
}

// Stop stops the gateway and removes its files. It is safe to call more
// than once.
func (g *Gateway) Stop() error {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if !g.stopped {
		g.stopped = true
		g.pipe.Close()
		if err := g.watch.Wait(); err != nil {
			g.stopErr = fmt.Errorf("s3test: watchdog: %w", err)
		}
		if _, err := os.Stat(g.dir); !errors.Is(err, fs.ErrNotExist) && g.stopErr == nil {
			g.stopErr = fmt.Errorf("s3test: %s was not removed", g.dir)
		}
	}
	return g.stopErr
}

// shared is the per-process gateway behind Bucket. It is package state by
// necessity: one gateway is shared by every test of the process.
var shared struct {
	mu  sync.Mutex
	gw  *Gateway
	err error
}

// require turns an unavailable gateway into a skip, or a failure under CI.
func require(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v (scripts/install-deps.sh builds it; CI=true makes this a failure)", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Fatalf("CI=true and the S3 test gateway is unavailable (scripts/install-deps.sh should have built it): %v", err)
	}
	t.Fatal(err)
}

// Shared returns the process's shared gateway, starting it on first use. It
// skips t (fails it under CI=true) when the binary cannot be had.
func Shared(t testing.TB) *Gateway {
	t.Helper()
	airtest.SkipShort(t, "the S3 gateway (versitygw)")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.gw == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		bin, err := Binary(ctx)
		if err == nil {
			shared.gw, err = Start(ctx, bin)
		}
		shared.err = err
	}
	require(t, shared.err)
	return shared.gw
}

// Bucket returns the shared gateway and the name of a fresh, empty bucket
// on it. The bucket goes away with the gateway.
func Bucket(t testing.TB) (*Gateway, string) {
	t.Helper()
	g := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := g.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return g, name
}

// Main runs the tests and then stops the shared gateway (if one was
// started) before exiting. Use it as: func TestMain(m *testing.M) { s3test.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	g := shared.gw
	shared.gw, shared.err = nil, errors.New("s3test: shared gateway already stopped")
	shared.mu.Unlock()
	if g != nil {
		if err := g.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
