package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/e2b/envdfs"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb/filesystempbconnect"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

// e2bFS drives envdfs's handlers for one sandbox, behind a middleware
// that sets the target as the E2B gateway does (user from Basic auth on
// RPCs, from ?username= on /files).
type e2bFS struct {
	t    *testing.T
	url  string
	http *http.Client
	fs   filesystempbconnect.FilesystemClient
}

func newE2BFS(t *testing.T, s *server, id model.SandboxID) *e2bFS {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ws := envdfs.NewWatchers(logger)
	t.Cleanup(ws.Close)
	mux := http.NewServeMux()
	p, h := envdfs.NewHandler(logger, ws)
	mux.Handle(p, h)
	mux.Handle("/files", envdfs.FilesHandler(logger))
	native := s.client()
	users := guestuser.NewCache()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		if r.URL.Path == "/files" {
			user = r.URL.Query().Get("username")
		}
		mux.ServeHTTP(w, r.WithContext(target.With(r.Context(), target.Target{Sandbox: id, Native: native, User: user, Users: users})))
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(hc.CloseIdleConnections)
	return &e2bFS{t: t, url: srv.URL, http: hc, fs: filesystempbconnect.NewFilesystemClient(hc, srv.URL, connect.WithProtoJSON())}
}

// do sends one /files request and returns status, headers and body.
func (e *e2bFS) do(ctx context.Context, method, query string, hdr http.Header, body io.Reader) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.url+"/files?"+query, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s /files?%s: %v", method, query, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s /files?%s: read: %v", method, query, err)
	}
	return resp.StatusCode, resp.Header, data
}

// wantError checks a /files JSON error.
func (e *e2bFS) wantError(what string, status int, gotStatus int, body []byte) {
	e.t.Helper()
	var je struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if gotStatus != status || json.Unmarshal(body, &je) != nil || je.Code != status || je.Message == "" {
		e.t.Errorf("%s: %d %s; want %d JSON {code, message}", what, gotStatus, body, status)
	}
}

type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// multipartBody builds a form with one "file" part per (filename, data),
// writing the Content-Disposition by hand as E2B's SDK does (directories
// kept in the filename).
func multipartBody(t *testing.T, files [][2]string) (string, []byte) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, f[0]))
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(f[1]))
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

func (e *e2bFS) upload(ctx context.Context, query string, files [][2]string) []uploaded {
	e.t.Helper()
	ct, body := multipartBody(e.t, files)
	status, _, data := e.do(ctx, http.MethodPost, query, http.Header{"Content-Type": {ct}}, bytes.NewReader(body))
	var out []uploaded
	if status != http.StatusOK || json.Unmarshal(data, &out) != nil {
		e.t.Fatalf("upload %v (%s): %d %s", files, query, status, data)
	}
	return out
}

func (e *e2bFS) read(ctx context.Context, p string) []byte {
	e.t.Helper()
	status, hdr, data := e.do(ctx, http.MethodGet, "path="+url.QueryEscape(p), nil, nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET /files %s: %d %s", p, status, data)
	}
	if hdr.Get("Content-Length") != fmt.Sprint(len(data)) {
		e.t.Errorf("GET /files %s: Content-Length %q for %d bytes", p, hdr.Get("Content-Length"), len(data))
	}
	return data
}

func connectCode(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// TestE2BEnvdFilesystem drives envd's filesystem service and /files,
// translated to the native API, against a real sandbox.
func TestE2BEnvdFilesystem(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 5*time.Minute)
	native := s.client()
	sb := createSandbox(ctx, t, native, apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)
	u, err := guestuser.Lookup(ctx, native, id, "")
	if err != nil {
		t.Fatalf("default user: %v", err)
	}
	if _, err := native.Mkdir(ctx, id, u.Home); err != nil {
		t.Fatalf("mkdir home %s: %v", u.Home, err)
	}
	e := newE2BFS(t, s, id)
	fs := e.fs

	t.Run("multipart", func(t *testing.T) {
		got := e.upload(ctx, "", [][2]string{{"/tmp/e2b/a/b/one.txt", "one"}, {"rel/two.txt", "two"}})
		want := []uploaded{{"/tmp/e2b/a/b/one.txt", "one.txt", "file"}, {path.Join(u.Home.String(), "rel/two.txt"), "two.txt", "file"}}
		if !slices.Equal(got, want) {
			t.Errorf("multipart upload = %+v, want %+v", got, want)
		}
		if b := e.read(ctx, "/tmp/e2b/a/b/one.txt"); string(b) != "one" {
			t.Errorf("one.txt = %q", b)
		}
		if b := e.read(ctx, "rel/two.txt"); string(b) != "two" {
			t.Errorf("rel/two.txt = %q", b)
		}
		// The path query wins over the part's filename.
		got = e.upload(ctx, "path="+url.QueryEscape("/tmp/e2b/q.txt"), [][2]string{{"/tmp/e2b/ignored.txt", "queried"}})
		if len(got) != 1 || got[0].Path != "/tmp/e2b/q.txt" {
			t.Errorf("upload with ?path = %+v", got)
		}
		if b := e.read(ctx, "/tmp/e2b/q.txt"); string(b) != "queried" {
			t.Errorf("q.txt = %q", b)
		}
		if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/e2b/ignored.txt"})); connectCode(err) != "not_found" {
			t.Errorf("ignored.txt: %v", err)
		}
		// Overwrite.
		e.upload(ctx, "path=/tmp/e2b/q.txt", [][2]string{{"x", "again"}})
		if b := e.read(ctx, "/tmp/e2b/q.txt"); string(b) != "again" {
			t.Errorf("q.txt after overwrite = %q", b)
		}
	})

	t.Run("octet-stream gzip and download", func(t *testing.T) {
		data := make([]byte, 3<<20+17)
		_, _ = rand.Read(data[:1<<20])
		sum := sha256.Sum256(data)
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		_, _ = zw.Write(data)
		_ = zw.Close()
		status, _, body := e.do(ctx, http.MethodPost, "path=/tmp/e2b/big.bin", http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, &zbuf)
		var out []uploaded
		if status != 200 || json.Unmarshal(body, &out) != nil || len(out) != 1 || out[0] != (uploaded{"/tmp/e2b/big.bin", "big.bin", "file"}) {
			t.Fatalf("octet-stream upload: %d %s", status, body)
		}
		if got := e.read(ctx, "/tmp/e2b/big.bin"); sha256.Sum256(got) != sum {
			t.Errorf("identity download: %d bytes, sha256 differs", len(got))
		}
		status, hdr, body := e.do(ctx, http.MethodGet, "path=/tmp/e2b/big.bin", http.Header{"Accept-Encoding": {"gzip"}}, nil)
		if status != 200 || hdr.Get("Content-Encoding") != "gzip" {
			t.Fatalf("gzip download: %d %v", status, hdr)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || sha256.Sum256(got) != sum {
			t.Errorf("gzip download: %d bytes, %v", len(got), err)
		}
		status, _, body = e.do(ctx, http.MethodGet, "path=/tmp/e2b/big.bin", http.Header{"Accept-Encoding": {"br, identity;q=0"}}, nil)
		e.wantError("no acceptable encoding", http.StatusNotAcceptable, status, body)
		// Raw upload without a path; a body that is not gzip.
		status, _, body = e.do(ctx, http.MethodPost, "", http.Header{"Content-Type": {"application/octet-stream"}}, strings.NewReader("x"))
		e.wantError("octet-stream without path", 400, status, body)
		status, _, body = e.do(ctx, http.MethodPost, "path=/tmp/e2b/bad.gz", http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, strings.NewReader("not gzip at all"))
		e.wantError("bad gzip", 400, status, body)
		// File metadata (envd 0.6.2): kept with the file; over its bound
		// (a value of at most 1024 bytes) refused before anything is
		// written.
		status, _, body = e.do(ctx, http.MethodPost, "path=/tmp/e2b/m.txt", http.Header{"Content-Type": {"application/octet-stream"}, "X-Metadata-Color": {"red"}}, strings.NewReader("x"))
		if status != http.StatusOK {
			t.Errorf("upload with metadata: %d %s", status, body)
		}
		status, _, body = e.do(ctx, http.MethodPost, "path=/tmp/e2b/m2.txt", http.Header{"Content-Type": {"application/octet-stream"}, "X-Metadata-Color": {strings.Repeat("r", 1025)}}, strings.NewReader("x"))
		e.wantError("metadata", 400, status, body)
		ct, mb := multipartBody(t, nil)
		status, _, body = e.do(ctx, http.MethodPost, "", http.Header{"Content-Type": {ct}}, bytes.NewReader(mb))
		e.wantError("multipart without file", 400, status, body)
		// Empty file: Content-Length 0.
		e.upload(ctx, "path=/tmp/e2b/empty", [][2]string{{"empty", ""}})
		if b := e.read(ctx, "/tmp/e2b/empty"); len(b) != 0 {
			t.Errorf("empty = %q", b)
		}
	})

	t.Run("download errors", func(t *testing.T) {
		status, _, body := e.do(ctx, http.MethodGet, "path=/tmp/e2b", nil, nil)
		e.wantError("directory download", 400, status, body)
		status, _, body = e.do(ctx, http.MethodGet, "path=/tmp/e2b/missing", nil, nil)
		e.wantError("missing download", 404, status, body)
		status, _, body = e.do(ctx, http.MethodGet, "", nil, nil)
		e.wantError("download without path", 400, status, body)
		status, _, body = e.do(ctx, http.MethodGet, "path=/etc/hosts&username=nosuchuser", nil, nil)
		e.wantError("unknown user", 401, status, body)
		status, _, body = e.do(ctx, http.MethodPut, "path=/tmp/x", nil, nil)
		e.wantError("PUT", 405, status, body)
	})

	t.Run("stat mkdir move remove", func(t *testing.T) {
		st, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/e2b/q.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		if en := st.Msg.GetEntry(); en.GetType() != filesystempb.FileType_FILE_TYPE_FILE || en.GetName() != "q.txt" || en.GetPath() != "/tmp/e2b/q.txt" ||
			en.GetSize() != 5 || en.GetPermissions() != "-rw-r--r--" || en.GetMode() != 0o644 || en.GetModifiedTime() == nil {
			t.Errorf("stat q.txt = %v", en)
		}
		if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/e2b/nope"})); connectCode(err) != "not_found" {
			t.Errorf("stat missing: %v", err)
		}
		req := connect.NewRequest(&filesystempb.StatRequest{Path: "/"})
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nosuchuser:")))
		if _, err := fs.Stat(ctx, req); connectCode(err) != "unauthenticated" {
			t.Errorf("stat as unknown user: %v", err)
		}
		req = connect.NewRequest(&filesystempb.StatRequest{Path: "~"})
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
		if st, err := fs.Stat(ctx, req); err != nil || st.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("stat ~ as root: %v %v", st, err)
		}

		md, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/new/deep/dir"}))
		if err != nil || md.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || md.Msg.GetEntry().GetPath() != "/tmp/e2b/new/deep/dir" {
			t.Fatalf("makedir: %v %v", md, err)
		}
		if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/new/deep/dir"})); connectCode(err) != "already_exists" {
			t.Errorf("makedir twice: %v", err)
		}
		if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/q.txt"})); connectCode(err) != "invalid_argument" {
			t.Errorf("makedir over a file: %v", err)
		}

		mv, err := fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "/tmp/e2b/q.txt", Destination: "/tmp/e2b/moved/q2.txt"}))
		if err != nil || mv.Msg.GetEntry().GetPath() != "/tmp/e2b/moved/q2.txt" || mv.Msg.GetEntry().GetName() != "q2.txt" {
			t.Fatalf("move: %v %v", mv, err)
		}
		if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/e2b/q.txt"})); connectCode(err) != "not_found" {
			t.Errorf("moved source still there: %v", err)
		}
		if b := e.read(ctx, "/tmp/e2b/moved/q2.txt"); string(b) != "again" {
			t.Errorf("moved content %q", b)
		}
		if _, err := fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "/tmp/e2b/nope", Destination: "/tmp/e2b/x"})); connectCode(err) != "not_found" {
			t.Errorf("move missing: %v", err)
		}

		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/e2b/new"})); err != nil {
			t.Fatalf("remove dir: %v", err)
		}
		if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/e2b/new"})); connectCode(err) != "not_found" {
			t.Errorf("removed dir still there: %v", err)
		}
		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/e2b/new"})); err != nil {
			t.Errorf("remove missing: %v", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		names := func(depth uint32) []string {
			t.Helper()
			l, err := fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/e2b", Depth: depth}))
			if err != nil {
				t.Fatalf("list depth %d: %v", depth, err)
			}
			var out []string
			for _, en := range l.Msg.GetEntries() {
				if en.GetPath() != path.Join("/tmp/e2b", strings.TrimPrefix(en.GetPath(), "/tmp/e2b/")) || path.Base(en.GetPath()) != en.GetName() {
					t.Errorf("entry %v: name/path mismatch", en)
				}
				rel := strings.TrimPrefix(en.GetPath(), "/tmp/e2b/")
				if en.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
					rel += "/"
				}
				out = append(out, rel)
			}
			return out
		}
		want1 := []string{"a/", "big.bin", "empty", "m.txt", "moved/"}
		if got := names(1); !slices.Equal(got, want1) {
			t.Errorf("depth 1 = %v, want %v", got, want1)
		}
		if got := names(0); !slices.Equal(got, want1) {
			t.Errorf("depth 0 = %v, want %v", got, want1)
		}
		want2 := []string{"a/", "a/b/", "big.bin", "empty", "m.txt", "moved/", "moved/q2.txt"}
		if got := names(2); !slices.Equal(got, want2) {
			t.Errorf("depth 2 = %v, want %v", got, want2)
		}
		if _, err := fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/e2b/big.bin"})); connectCode(err) != "invalid_argument" {
			t.Errorf("list a file: %v", err)
		}
		if _, err := fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/e2b/nope"})); connectCode(err) != "not_found" {
			t.Errorf("list missing: %v", err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/w"})); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req := connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/tmp/e2b/w", IncludeEntry: true})
		req.Header().Set("Keepalive-Ping-Interval", "1")
		stream, err := fs.WatchDir(wctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() || stream.Msg().GetStart() == nil {
			t.Fatalf("first message %v, err %v; want start", stream.Msg(), stream.Err())
		}
		if !stream.Receive() || stream.Msg().GetKeepalive() == nil {
			t.Fatalf("after 1 s of silence: %v, err %v; want keepalive", stream.Msg(), stream.Err())
		}
		e.upload(ctx, "", [][2]string{{"/tmp/e2b/w/f.txt", "hello"}})
		deadline := time.Now().Add(20 * time.Second)
		for {
			if time.Now().After(deadline) || !stream.Receive() {
				t.Fatalf("no CREATE of f.txt (err %v)", stream.Err())
			}
			ev := stream.Msg().GetFilesystem()
			if ev == nil {
				continue
			}
			if strings.HasPrefix(ev.GetName(), ".airlock") {
				t.Errorf("agent temporary file reported: %v", ev)
			}
			if ev.GetName() == "f.txt" && ev.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
				if ev.GetEntry().GetPath() != "/tmp/e2b/w/f.txt" || ev.GetEntry().GetSize() != 5 {
					t.Errorf("CREATE entry %v", ev.GetEntry())
				}
				break
			}
		}
		cancel()
		// Recursive: an existing subdirectory, and one made while watching.
		if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/r/s"})); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		rs, err := fs.WatchDir(rctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/tmp/e2b/r", Recursive: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		if !rs.Receive() || rs.Msg().GetStart() == nil {
			t.Fatalf("recursive: first message %v, err %v", rs.Msg(), rs.Err())
		}
		waitFor := func(name string, typ filesystempb.EventType) {
			t.Helper()
			var seen []string
			for {
				if !rs.Receive() {
					t.Fatalf("recursive: no %v %s (saw %v, err %v)", typ, name, seen, rs.Err())
				}
				if ev := rs.Msg().GetFilesystem(); ev != nil {
					if ev.GetName() == name && ev.GetType() == typ {
						return
					}
					seen = append(seen, ev.GetType().String()+" "+ev.GetName())
				}
			}
		}
		e.upload(ctx, "", [][2]string{{"/tmp/e2b/r/s/x.txt", "x"}})
		waitFor("s/x.txt", filesystempb.EventType_EVENT_TYPE_CREATE)
		if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/e2b/r/new"})); err != nil {
			t.Fatal(err)
		}
		waitFor("new", filesystempb.EventType_EVENT_TYPE_CREATE)
		e.upload(ctx, "", [][2]string{{"/tmp/e2b/r/new/y.txt", "y"}})
		waitFor("new/y.txt", filesystempb.EventType_EVENT_TYPE_CREATE)
		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/e2b/r/s"})); err != nil {
			t.Fatal(err)
		}
		waitFor("s", filesystempb.EventType_EVENT_TYPE_REMOVE)
		rcancel()
		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/e2b/r"})); err != nil {
			t.Fatal(err)
		}

		rs, err = fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/tmp/e2b/big.bin"}))
		if err == nil {
			for rs.Receive() {
			}
			err = rs.Err()
			rs.Close()
		}
		if connectCode(err) != "invalid_argument" {
			t.Errorf("watch a file: %v", err)
		}
	})

	t.Run("polling watcher", func(t *testing.T) {
		cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/tmp/e2b/w"}))
		if err != nil {
			t.Fatal(err)
		}
		wid := cw.Msg.GetWatcherId()
		e.upload(ctx, "", [][2]string{{"/tmp/e2b/w/g.txt", "g"}})
		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/e2b/w/f.txt"})); err != nil {
			t.Fatal(err)
		}
		var seen []string
		deadline := time.Now().Add(20 * time.Second)
		for !slices.Contains(seen, "REMOVE f.txt") {
			if time.Now().After(deadline) {
				t.Fatalf("events %v; want CREATE g.txt and REMOVE f.txt", seen)
			}
			ev, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: wid}))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ev.Msg.GetEvents() {
				seen = append(seen, strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_")+" "+e.GetName())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !slices.Contains(seen, "CREATE g.txt") {
			t.Errorf("events %v: no CREATE g.txt", seen)
		}
		if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: wid})); err != nil {
			t.Fatal(err)
		}
		if _, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: wid})); connectCode(err) != "not_found" {
			t.Errorf("events of a removed watcher: %v", err)
		}
		if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: wid})); connectCode(err) != "not_found" {
			t.Errorf("remove twice: %v", err)
		}
	})

	t.Run("path rules", func(t *testing.T) {
		// Guest paths are cleaned like envd's filepath.Abs: ".." stops at "/".
		rel := strings.Repeat("../", 12) + "tmp/e2b/trav.txt"
		status, _, body := e.do(ctx, http.MethodPost, "path="+url.QueryEscape(rel), http.Header{"Content-Type": {"application/octet-stream"}}, strings.NewReader("t"))
		var out []uploaded
		if status != 200 || json.Unmarshal(body, &out) != nil || len(out) != 1 || out[0].Path != "/tmp/e2b/trav.txt" {
			t.Errorf("upload to %s: %d %s", rel, status, body)
		}
		st, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "../../../../../../../etc/passwd"}))
		if err != nil || st.Msg.GetEntry().GetPath() != "/etc/passwd" {
			t.Errorf("stat ../…/etc/passwd: %v %v", st, err)
		}
		// %2e%2e in the query is "..", cleaned the same way.
		status, _, body = e.do(ctx, http.MethodGet, "path=%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd", nil, nil)
		if status != 200 || !bytes.Contains(body, []byte("root:")) {
			t.Errorf("GET %%2e%%2e…/etc/passwd: %d %.80s", status, body)
		}
		// A literal "%2e%2e" is a name like any other.
		status, _, body = e.do(ctx, http.MethodGet, "path="+url.QueryEscape("/tmp/%2e%2e/etc/passwd"), nil, nil)
		e.wantError("literal %2e%2e", 404, status, body)
		for _, bad := range []string{"/tmp/a\x00b", "/" + strings.Repeat("x", 300)} {
			if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: bad})); connectCode(err) != "invalid_argument" {
				t.Errorf("stat %.20q: %v", bad, err)
			}
		}
		if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{})); connectCode(err) != "invalid_argument" {
			t.Errorf("stat empty path: %v", err)
		}
	})

	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
