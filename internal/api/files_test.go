package api

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
)

// filesEnv is a testEnv whose sandboxes all share one embedded agent with a
// temp dir as its files root, plus a data plane on its own server.
type filesEnv struct {
	*testEnv
	root   string
	client *agentclient.Client
	dp     *httptest.Server
}

func (f *filesEnv) Agent(model.SandboxID) (*agentclient.Client, error) { return f.client, nil }

func newFilesEnv(t *testing.T, opts ...envOption) *filesEnv {
	t.Helper()
	f := &filesEnv{root: t.TempDir()}
	ag, err := agent.New(agent.Options{FilesRoot: f.root, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		ag.Close()
	})
	f.client = agentclient.New(func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go ag.ServeConn(ctx, guest)
		return host, nil
	}, nil)
	t.Cleanup(func() { f.client.Close() })
	// As in the server: the API signs file tokens with the keyring's
	// Issuer, the data plane checks them with its Verifier (public keys).
	f.testEnv = newEnv(t, append([]envOption{func(c *envConfig) { c.Guests = agentguest.New(f); c.FileTokens = c.Attach }}, opts...)...)
	dp, err := dataplane.New(dataplane.Config{Store: f.st, Agents: f, FileTokens: f.ring.Verifier(), Verifier: f.ring.Verifier(), Now: f.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	dp.Register(mux)
	f.dp = httptest.NewServer(f.api.Wrap(mux)) // as in the server
	t.Cleanup(f.dp.Close)
	return f
}

// transfer asks for a transfer and returns it with its URL moved to the
// data-plane server.
func (f *filesEnv) transfer(key, sb, path, direction string) apiv1.Transfer {
	f.t.Helper()
	var tr apiv1.Transfer
	body, _ := json.Marshal(apiv1.CreateTransferRequest{Path: path, Direction: direction})
	f.do("POST", "/v1/sandboxes/"+sb+"/files/transfers", key, string(body)).want(f.t, http.StatusCreated).decode(f.t, &tr)
	if !strings.HasPrefix(tr.URL, f.srv.URL+"/data/v1/sandboxes/"+sb+"/files/"+direction) || tr.Method != apiv1.TransferMethod(direction) {
		f.t.Fatalf("transfer %+v", tr)
	}
	tr.URL = f.dp.URL + strings.TrimPrefix(tr.URL, f.srv.URL)
	return tr
}

// send performs a data-plane request with a bearer token.
func (f *filesEnv) send(method, u, token string, body io.Reader, contentType string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := f.dp.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func wantDP(t *testing.T, res *http.Response, status int, code string) []byte {
	t.Helper()
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", res.StatusCode, status, b)
	}
	if code != "" {
		var e apiv1.Error
		if err := json.Unmarshal(b, &e); err != nil || e.Code != code {
			t.Fatalf("error %s, want code %s", b, code)
		}
	}
	return b
}

func TestFilesAPI(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	base := "/v1/sandboxes/" + sb + "/files"
	f.do("GET", base+"/stat?path=/", f.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
	f.finishCreate(model.SandboxID(sb))

	var fi apiv1.FileInfo
	f.do("POST", base+"/mkdir", f.keyA, `{"path": "/data/sub"}`).want(t, http.StatusOK).decode(t, &fi)
	if fi.Type != apiv1.FileTypeDirectory || fi.Path != "/data/sub" {
		t.Fatalf("mkdir → %+v", fi)
	}

	// Upload 8 MiB on the data plane, download it again.
	const size = 8 << 20
	content := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(content)
	up := f.transfer(f.keyA, sb, "/data/sub/f.bin", apiv1.DirectionUpload)
	if d := up.ExpiresAt.Sub(f.clock.Now()); d < 118*time.Second || d > 120*time.Second {
		t.Fatalf("transfer expires in %s", d)
	}
	b := wantDP(t, f.send("PUT", up.URL+"?mode=0640", up.Token, bytes.NewReader(content), "application/octet-stream"), http.StatusOK, "")
	if err := json.Unmarshal(b, &fi); err != nil || fi.Size != size || fi.Mode != 0o640 {
		t.Fatalf("upload → %s", b)
	}
	down := f.transfer(f.keyA, sb, "/data/sub/f.bin", apiv1.DirectionDownload)
	res := f.send("GET", down.URL, down.Token, nil, "")
	if res.ContentLength != size {
		t.Errorf("Content-Length %d", res.ContentLength)
	}
	// A guest's file never runs as the server's (the console's) origin.
	if got := res.Header.Get("Content-Security-Policy"); got != "sandbox" {
		t.Errorf("download Content-Security-Policy %q, want sandbox", got)
	}
	if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("download X-Content-Type-Options %q", got)
	}
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename=f.bin` {
		t.Errorf("download Content-Disposition %q", got)
	}
	if got := wantDP(t, res, http.StatusOK, ""); sha256.Sum256(got) != sha256.Sum256(content) {
		t.Fatal("downloaded bytes differ")
	}
	// The token is the capability: ?token= works too, once per path and direction only.
	wantDP(t, f.send("GET", down.URL+"?token="+url.QueryEscape(down.Token), "", nil, ""), http.StatusOK, "")
	wantDP(t, f.send("PUT", strings.Replace(down.URL, "/download", "/upload", 1), down.Token, strings.NewReader("x"), ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)

	var l apiv1.FileList
	f.do("GET", base+"/list?path=/data/sub", f.keyA, "").want(t, http.StatusOK).decode(t, &l)
	if len(l.Entries) != 1 || l.Entries[0].Name != "f.bin" || l.Entries[0].Size != size {
		t.Fatalf("list → %+v", l)
	}
	f.do("POST", base+"/move", f.keyA, `{"from": "/data/sub/f.bin", "to": "/data/g.bin"}`).want(t, http.StatusOK).decode(t, &fi)
	if fi.Path != "/data/g.bin" || fi.Size != size {
		t.Fatalf("move → %+v", fi)
	}
	f.do("POST", base+"/mkdir", f.keyA, `{"path": "/data/sub"}`).want(t, http.StatusOK)
	f.do("POST", base+"/move", f.keyA, `{"from": "/data/g.bin", "to": "/data/sub"}`).wantError(t, http.StatusConflict, apiv1.CodeAlreadyExists)

	// Tar in and out on the data plane.
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for name, body := range map[string]string{"a.txt": "alpha", "dir/b.txt": "beta"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(body))
	}
	tw.Close()
	tin := f.transfer(f.keyA, sb, "/t", apiv1.DirectionTarIn)
	b = wantDP(t, f.send("PUT", tin.URL, tin.Token, &tarBuf, "application/x-tar"), http.StatusOK, "")
	var tres apiv1.TarResult
	if err := json.Unmarshal(b, &tres); err != nil || tres.Entries != 2 || tres.Bytes != 9 {
		t.Fatalf("tar-in → %s", b)
	}
	tout := f.transfer(f.keyA, sb, "/t", apiv1.DirectionTarOut)
	tr := tar.NewReader(bytes.NewReader(wantDP(t, f.send("GET", tout.URL, tout.Token, nil, ""), http.StatusOK, "")))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "a.txt,dir/,dir/b.txt" {
		t.Fatalf("tar-out names %v", names)
	}

	// Errors with stable codes, nothing changed.
	f.do("POST", base+"/remove", f.keyA, `{"path": "/data"}`).wantError(t, http.StatusConflict, apiv1.CodeDirectoryNotEmpty)
	f.send2(req{method: "GET", path: base + "/stat?path=../etc", key: f.keyA, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidPath)
	f.send2(req{method: "POST", path: base + "/mkdir", key: f.keyA, body: `{"path": "/a/../b"}`}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidPath)
	f.do("GET", base+"/stat?path=/nope", f.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	f.do("GET", base+"/list?path=/data/g.bin", f.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeNotADirectory)
	if err := unix.Mkfifo(filepath.Join(f.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	dl := f.transfer(f.keyA, sb, "/fifo", apiv1.DirectionDownload)
	wantDP(t, f.send("GET", dl.URL, dl.Token, nil, ""), http.StatusBadRequest, apiv1.CodeUnsupportedFileType)
	dl = f.transfer(f.keyA, sb, "/data", apiv1.DirectionDownload)
	wantDP(t, f.send("GET", dl.URL, dl.Token, nil, ""), http.StatusConflict, apiv1.CodeIsADirectory)
	f.send2(req{method: "POST", path: base + "/transfers", key: f.keyA, body: `{"path": "/x", "direction": "sideways"}`, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	// Another project does not see the sandbox.
	f.do("GET", base+"/stat?path=/", f.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)

	f.do("POST", base+"/remove", f.keyA, `{"path": "/data", "recursive": true}`).want(t, http.StatusOK)
	f.do("GET", base+"/stat?path=/data", f.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	if _, err := os.Stat(filepath.Join(f.root, "data")); !os.IsNotExist(err) {
		t.Fatalf("data still there: %v", err)
	}
}

// send2 is testEnv.send (filesEnv.send is the data-plane one).
func (f *filesEnv) send2(r req) *resp { return f.testEnv.send(r) }

func TestFilesTokens(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	f.finishCreate(model.SandboxID(sb))
	if err := os.WriteFile(filepath.Join(f.root, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := f.transfer(f.keyA, sb, "/f", apiv1.DirectionDownload)

	// A files token is refused by the management API, an API key by the data plane.
	f.do("GET", "/v1/sandboxes/"+sb, tr.Token, "").wantError(t, http.StatusUnauthorized, apiv1.CodeWrongTokenKind)
	wantDP(t, f.send("GET", tr.URL, f.keyA, nil, ""), http.StatusUnauthorized, apiv1.CodeWrongTokenKind)
	wantDP(t, f.send("GET", tr.URL, "", nil, ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	wantDP(t, f.send("GET", tr.URL, tr.Token+"x", nil, ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	wantDP(t, f.send("GET", tr.URL, "alf_"+strings.Repeat("A", 40)+"."+strings.Repeat("B", 43), nil, ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// Another sandbox's URL with this token.
	other := strings.Replace(tr.URL, sb, model.NewSandboxID().String(), 1)
	wantDP(t, f.send("GET", other, tr.Token, nil, ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// Upload content type.
	up := f.transfer(f.keyA, sb, "/g", apiv1.DirectionUpload)
	wantDP(t, f.send("PUT", up.URL, up.Token, strings.NewReader("{}"), "application/json"), http.StatusUnsupportedMediaType, apiv1.CodeUnsupportedMedia)

	wantDP(t, f.send("GET", tr.URL, tr.Token, nil, ""), http.StatusOK, "")
	f.clock.mu.Lock()
	f.clock.t = f.clock.t.Add(auth.FileTokenTTL + auth.ClockSkew + time.Second) // exp is checked with ClockSkew of leeway
	f.clock.mu.Unlock()
	wantDP(t, f.send("GET", tr.URL, tr.Token, nil, ""), http.StatusUnauthorized, apiv1.CodeTokenExpired)
}

func TestFilesWatchDataPlane(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	f.finishCreate(model.SandboxID(sb))
	if err := os.Mkdir(filepath.Join(f.root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := f.transfer(f.keyA, sb, "/w", apiv1.DirectionWatch)
	res := f.send("GET", tr.URL, tr.Token, nil, "")
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("watch: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(res.Body)
	var ev apiv1.FileEvent
	if err := dec.Decode(&ev); err != nil || ev.Type != "ready" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if err := os.WriteFile(filepath.Join(f.root, "w/new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&ev); err != nil || ev.Type != "create" || ev.Path != "/w/new" {
		t.Fatalf("event %+v, %v", ev, err)
	}
}

// TestFilesLargeTransfer streams a large file up and down through the data
// plane (HTTP/1.1 → data plane → HTTP/2 → agent) and checks that the heap
// stays flat: nothing on the path buffers the whole body.
func TestFilesLargeTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	f.finishCreate(model.SandboxID(sb))
	size := int64(256 << 20)
	if raceDetector {
		size = 32 << 20
	}
	peak, stop := watchHeap()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	up := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{3}), size), up)
	tr := f.transfer(f.keyA, sb, "/big", apiv1.DirectionUpload)
	wantDP(t, f.send("PUT", tr.URL, tr.Token, src, "application/octet-stream"), http.StatusOK, "")
	tr = f.transfer(f.keyA, sb, "/big", apiv1.DirectionDownload)
	res := f.send("GET", tr.URL, tr.Token, nil, "")
	down := sha256.New()
	n, err := io.CopyBuffer(down, res.Body, make([]byte, 64<<10))
	res.Body.Close()
	stop()
	if err != nil || n != size || !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatalf("download: %d of %d bytes, %v; hashes equal: %v", n, size, err, bytes.Equal(up.Sum(nil), down.Sum(nil)))
	}
	grew := int64(peak()) - int64(base.HeapInuse)
	t.Logf("heap grew by %d MiB while streaming %d MiB each way", grew>>20, size>>20)
	if grew > 64<<20 {
		t.Errorf("heap grew by %d MiB while streaming %d MiB", grew>>20, size>>20)
	}
}

// watchHeap samples HeapInuse until stop is called; peak returns the maximum.
func watchHeap() (peak func() uint64, stop func()) {
	var max atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > max.Load() {
				max.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return max.Load, func() { close(done); wg.Wait() }
}
