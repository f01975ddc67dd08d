package envdfs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/connecterr"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb/filesystempbconnect"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/keepalive"
	"github.com/airlockdev/airlock/internal/model"
)

func TestResolvePath(t *testing.T) {
	home := model.GuestPath("/home/user")
	tests := []struct {
		in   string
		want model.GuestPath
		err  bool
	}{
		{in: "a.txt", want: "/home/user/a.txt"},
		{in: "./a/../b", want: "/home/user/b"},
		{in: "../../etc/passwd", want: "/etc/passwd"},
		{in: "../../../../../etc/passwd", want: "/etc/passwd"},
		{in: "/tmp//x/", want: "/tmp/x"},
		{in: "/../../x", want: "/x"},
		{in: "/", want: "/"},
		{in: "~", want: "/home/user"},
		{in: "~/d/f", want: "/home/user/d/f"},
		{in: "~other", want: "/home/user/~other"},
		{in: "%2e%2e/x", want: "/home/user/%2e%2e/x"},
		{in: "", err: true},
		{in: "a\x00b", err: true},
		{in: "/" + strings.Repeat("a", 256), err: true},
		{in: "\xff", err: true},
	}
	for _, tt := range tests {
		got, err := resolvePath(home, tt.in)
		if (err != nil) != tt.err {
			t.Errorf("resolvePath(%q) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("resolvePath(%q) code %v, want invalid_argument", tt.in, connect.CodeOf(err))
			}
			continue
		}
		if got != tt.want {
			t.Errorf("resolvePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"a", "../..", "~/x", "/a/./b", "%2e%2e", "//", "~"} {
		f.Add("/home/user", s)
	}
	f.Fuzz(func(t *testing.T, homeRaw, s string) {
		home, err := model.ParseGuestPath(homeRaw)
		if err != nil {
			return
		}
		p, err := resolvePath(home, s)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("code %v", connect.CodeOf(err))
			}
			return
		}
		if _, err := model.ParseGuestPath(p.String()); err != nil {
			t.Fatalf("resolvePath(%q) = %q, not a guest path: %v", s, p, err)
		}
		if !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "~") && !strings.Contains(s, "..") &&
			p != home && !strings.HasPrefix(p.String(), strings.TrimSuffix(home.String(), "/")+"/") {
			t.Fatalf("relative %q left home %q: %q", s, home, p)
		}
	})
}

func TestEntryOf(t *testing.T) {
	mt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in       apiv1.FileInfo
		typ      filesystempb.FileType
		mode     uint32
		perms    string
		linkTo   string
		wantName string
	}{
		{apiv1.FileInfo{Path: "/a/f", Name: "f", Type: "file", Size: 3, Mode: 0o644, ModTime: mt, UID: 1000, GID: 1000}, filesystempb.FileType_FILE_TYPE_FILE, 0o644, "-rw-r--r--", "", "f"},
		{apiv1.FileInfo{Path: "/a/d", Name: "d", Type: "directory", Mode: 0o755, ModTime: mt}, filesystempb.FileType_FILE_TYPE_DIRECTORY, 0o755, "drwxr-xr-x", "", "d"},
		{apiv1.FileInfo{Path: "/tmp", Name: "tmp", Type: "directory", Mode: 0o1777}, filesystempb.FileType_FILE_TYPE_DIRECTORY, 0o777, "dtrwxrwxrwx", "", "tmp"},
		{apiv1.FileInfo{Path: "/bin/su", Name: "su", Type: "file", Mode: 0o4755}, filesystempb.FileType_FILE_TYPE_FILE, 0o755, "urwxr-xr-x", "", "su"},
		{apiv1.FileInfo{Path: "/a/l", Name: "l", Type: "symlink", Mode: 0o777, LinkTarget: "../b"}, filesystempb.FileType_FILE_TYPE_SYMLINK, 0o777, "Lrwxrwxrwx", "/b", "l"},
		{apiv1.FileInfo{Path: "/a/l2", Type: "symlink", Mode: 0o777, LinkTarget: "/etc/x"}, filesystempb.FileType_FILE_TYPE_SYMLINK, 0o777, "Lrwxrwxrwx", "/etc/x", "l2"},
		{apiv1.FileInfo{Path: "/dev/null", Name: "null", Type: "other", Mode: 0o666}, filesystempb.FileType_FILE_TYPE_UNSPECIFIED, 0o666, "?rw-rw-rw-", "", "null"},
	}
	acc := guestuser.Accounts{
		Users:  []guestuser.User{{Name: "root", UID: 0}, {Name: "user", UID: 1000, GID: 1000}},
		Groups: map[int64]string{0: "root", 1000: "user"},
	}
	for _, tt := range tests {
		e := entryOf(tt.in, acc)
		wantOwner := map[uint32]string{0: "root", 1000: "user"}[tt.in.UID]
		if e.GetOwner() != wantOwner || e.GetGroup() != wantOwner {
			t.Errorf("entryOf(%+v) owner %q group %q, want %q", tt.in, e.GetOwner(), e.GetGroup(), wantOwner)
		}
		if e.GetType() != tt.typ || e.GetMode() != tt.mode || e.GetPermissions() != tt.perms || e.GetName() != tt.wantName || e.GetPath() != tt.in.Path || e.GetSize() != tt.in.Size {
			t.Errorf("entryOf(%+v) = %v", tt.in, e)
		}
		if e.GetSymlinkTarget() != tt.linkTo || (tt.linkTo == "") != (e.SymlinkTarget == nil) {
			t.Errorf("entryOf(%+v) symlink target %v, want %q", tt.in, e.SymlinkTarget, tt.linkTo)
		}
		if tt.in.ModTime.IsZero() != (e.GetModifiedTime() == nil) || (e.GetModifiedTime() != nil && !e.GetModifiedTime().AsTime().Equal(tt.in.ModTime)) {
			t.Errorf("entryOf(%+v) modified %v", tt.in, e.GetModifiedTime())
		}
	}
}

func TestEntryOfNamesAndMetadata(t *testing.T) {
	acc := guestuser.Accounts{Users: []guestuser.User{{Name: "user", UID: 1000, GID: 1000}}, Groups: map[int64]string{1001: "staff"}}
	e := entryOf(apiv1.FileInfo{Path: "/f", Type: "file", UID: 1000, GID: 1001, Metadata: map[string]string{"author": "mish"}}, acc)
	if e.GetOwner() != "user" || e.GetGroup() != "staff" || e.GetMetadata()["author"] != "mish" {
		t.Fatalf("entry %v", e)
	}
	// IDs without a name are shown as numbers, as ls shows them.
	e = entryOf(apiv1.FileInfo{Path: "/f", Type: "file", UID: 4242, GID: 4343}, acc)
	if e.GetOwner() != "4242" || e.GetGroup() != "4343" || e.GetMetadata() != nil {
		t.Fatalf("entry %v", e)
	}
}

func TestUploadMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		want map[string]string
		bad  bool
	}{
		{"none", http.Header{"Content-Type": {"x"}}, nil, false},
		{"lowercased", http.Header{"X-Metadata-Author": {"mish"}, "X-Metadata-Purpose": {"upload"}}, map[string]string{"author": "mish", "purpose": "upload"}, false},
		{"twice", http.Header{"X-Metadata-A": {"1", "2"}}, nil, true},
		{"bad value", http.Header{"X-Metadata-A": {"a\x01"}}, nil, true},
		{"too long", http.Header{"X-Metadata-A": {strings.Repeat("v", model.MaxFileMetadataValue+1)}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := uploadMetadata(tc.h)
			if tc.bad != (err != nil) {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				var he *httpError
				if !errors.As(err, &he) || he.status != http.StatusBadRequest {
					t.Fatalf("err %v is not a 400", err)
				}
				return
			}
			if len(m) != len(tc.want) {
				t.Fatalf("got %v, want %v", m, tc.want)
			}
			for k, v := range tc.want {
				if m[k] != v {
					t.Fatalf("got %v, want %v", m, tc.want)
				}
			}
		})
	}
}

func TestTranslate(t *testing.T) {
	type ev struct {
		name string
		typ  filesystempb.EventType
	}
	const (
		c  = filesystempb.EventType_EVENT_TYPE_CREATE
		w  = filesystempb.EventType_EVENT_TYPE_WRITE
		rm = filesystempb.EventType_EVENT_TYPE_REMOVE
		rn = filesystempb.EventType_EVENT_TYPE_RENAME
	)
	tmp := "/w/.airlock-upload-0123456789abcdef"
	tests := []struct {
		dir  string
		in   apiv1.FileEvent
		want []ev
		err  bool
	}{
		{"/w", apiv1.FileEvent{Type: "ready", Path: "/w"}, nil, false},
		{"/w", apiv1.FileEvent{Type: "create", Path: "/w/a"}, []ev{{"a", c}}, false},
		{"/w", apiv1.FileEvent{Type: "write", Path: "/w/a"}, []ev{{"a", w}}, false},
		{"/w", apiv1.FileEvent{Type: "remove", Path: "/w/a"}, []ev{{"a", rm}}, false},
		{"/w", apiv1.FileEvent{Type: "remove", Path: "/w", IsDir: true}, []ev{{".", rm}}, false},
		{"/", apiv1.FileEvent{Type: "create", Path: "/x"}, []ev{{"x", c}}, false},
		{"/w", apiv1.FileEvent{Type: "rename", From: "/w/a", Path: "/w/b"}, []ev{{"a", rn}, {"b", c}}, false},
		{"/w", apiv1.FileEvent{Type: "rename", From: "/w/a"}, []ev{{"a", rn}}, false},
		{"/w", apiv1.FileEvent{Type: "rename", Path: "/w/b"}, []ev{{"b", c}}, false},
		{"/w", apiv1.FileEvent{Type: "create", Path: tmp}, nil, false},
		{"/w", apiv1.FileEvent{Type: "write", Path: tmp}, nil, false},
		{"/w", apiv1.FileEvent{Type: "rename", From: tmp, Path: "/w/up.txt"}, []ev{{"up.txt", c}, {"up.txt", w}}, false},
		{"/w", apiv1.FileEvent{Type: "overflow"}, nil, true},
	}
	for _, tt := range tests {
		got, err := translate(tt.dir, tt.in)
		if (err != nil) != tt.err {
			t.Errorf("translate(%+v) error %v", tt.in, err)
			continue
		}
		var g []ev
		for _, e := range got {
			g = append(g, ev{e.GetName(), e.GetType()})
		}
		if len(g) != len(tt.want) {
			t.Errorf("translate(%q, %+v) = %v, want %v", tt.dir, tt.in, g, tt.want)
			continue
		}
		for i := range g {
			if g[i] != tt.want[i] {
				t.Errorf("translate(%q, %+v) = %v, want %v", tt.dir, tt.in, g, tt.want)
			}
		}
	}
}

func TestKeepaliveInterval(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", keepalive.Default},
		{"50", 50 * time.Second},
		{" 1 ", time.Second},
		{"0", keepalive.Min}, // bounded, as Start and Connect take it
		{"-3", keepalive.Default},
		{"x", keepalive.Default},
		{"999999999999", keepalive.Max},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.in != "" {
			h.Set(keepalive.Header, tt.in)
		}
		if got := keepaliveInterval(h); got != tt.want {
			t.Errorf("keepaliveInterval(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		code string
		want connect.Code
	}{
		{apiv1.CodeNotFound, connect.CodeNotFound},
		{apiv1.CodeIsADirectory, connect.CodeInvalidArgument},
		{apiv1.CodeAlreadyExists, connect.CodeAlreadyExists},
		{apiv1.CodeSandboxPaused, connect.CodeUnavailable},
		{apiv1.CodeTokenExpired, connect.CodeUnauthenticated},
		{"something_new", connect.CodeInternal},
	}
	for _, tt := range tests {
		if got := connecterr.Code(&client.APIError{Code: tt.code}); got != tt.want {
			t.Errorf("codeOf(%s) = %v, want %v", tt.code, got, tt.want)
		}
	}
	ctx := context.Background()
	if got := connect.CodeOf(nativeError(ctx, "x", errors.New("dial tcp: refused"))); got != connect.CodeUnavailable {
		t.Errorf("network error: %v", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := connect.CodeOf(nativeError(cctx, "x", errors.New("canceled"))); got != connect.CodeCanceled {
		t.Errorf("cancelled: %v", got)
	}
}

// TestUnauthenticated: without a target in the context every call is
// refused (Connect unauthenticated, /files 401 JSON).
func TestUnauthenticated(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	ws := NewWatchers(logger)
	defer ws.Close()
	mux := http.NewServeMux()
	p, h := NewHandler(logger, ws)
	mux.Handle(p, h)
	mux.Handle("/files", FilesHandler(logger))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	fs := filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	ctx := context.Background()
	if _, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Stat: %v", err)
	}
	if _, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: "w1"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetWatcherEvents: %v", err)
	}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequestWithContext(ctx, m, srv.URL+"/files?path=/etc/hosts", strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || json.Unmarshal(data, &body) != nil || body.Code != 401 || body.Message == "" {
			t.Errorf("%s /files: %d %s", m, resp.StatusCode, data)
		}
	}
	resp, err := srv.Client().Post(srv.URL+path.Join("/", "files"), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("POST /files without target: %d", resp.StatusCode)
	}
}
