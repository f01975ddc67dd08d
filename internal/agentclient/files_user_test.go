package agentclient_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// userHome makes root/home owned by 1000:1000, mode 0700, with one file.
func userHome(t *testing.T, root string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, setfsuid)")
	}
	// The test's temp dirs are 0700: let other users through to the root.
	for d := root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(root, "home")
	writeFile(t, filepath.Join(home, "mine"), "mine")
	for _, p := range []string{home, filepath.Join(home, "mine")} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	return home
}

func ownerOf(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

func TestFileUserOperations(t *testing.T) {
	c, root, _ := filesAgent(t)
	home := userHome(t, root)
	owner := agentclient.AsUser(&agentproto.FileUser{UID: 1000, GID: 1000})
	other := agentclient.AsUser(&agentproto.FileUser{UID: 1001, GID: 1001})
	ctx := context.Background()

	tests := []struct {
		name      string
		do        func(opt agentclient.FileOption) error
		created   string // a path the call creates (owner checked when it succeeds)
		byOwner   bool   // succeeds as 1000:1000
		byOther   bool   // succeeds as 1001:1001
		byDefault bool   // succeeds as the agent (root here: true)
	}{
		{"write", func(o agentclient.FileOption) error {
			_, err := c.WriteFile(ctx, "/home/a.txt", -1, strings.NewReader("hi"), o)
			return err
		}, "a.txt", true, false, true},
		{"mkdir", func(o agentclient.FileOption) error {
			_, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/home/d/e"}, o)
			return err
		}, "d/e", true, false, true},
		{"stat", func(o agentclient.FileOption) error {
			_, err := c.Stat(ctx, "/home/mine", o)
			return err
		}, "", true, false, true},
		{"list", func(o agentclient.FileOption) error {
			_, err := c.ListDir(ctx, "/home", o)
			return err
		}, "", true, false, true},
		{"read", func(o agentclient.FileOption) error {
			body, _, err := c.ReadFile(ctx, "/home/mine", o)
			if err == nil {
				body.Close()
			}
			return err
		}, "", true, false, true},
		{"tar-in", func(o agentclient.FileOption) error {
			_, err := c.TarIn(ctx, "/home/t", tarOf(t, map[string]string{"f": "x"}), o)
			return err
		}, "t/f", true, false, true},
		{"watch", func(o agentclient.FileOption) error {
			ws, err := c.Watch(ctx, "/home", o)
			if err == nil {
				ws.Close()
			}
			return err
		}, "", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanup := func() {
				if tt.created != "" {
					os.RemoveAll(filepath.Join(home, strings.Split(tt.created, "/")[0]))
				}
			}
			cleanup()
			err := tt.do(other)
			if tt.byOther != (err == nil) {
				t.Fatalf("as 1001: err = %v, want success %v", err, tt.byOther)
			}
			if err != nil {
				wantCode(t, "as 1001", err, agentproto.CodePermissionDenied)
			}
			cleanup()
			if err := tt.do(owner); (err == nil) != tt.byOwner {
				t.Fatalf("as 1000: err = %v, want success %v", err, tt.byOwner)
			}
			if tt.created != "" {
				p := home
				for _, part := range strings.Split(tt.created, "/") {
					p = filepath.Join(p, part)
					if uid, gid := ownerOf(t, p); uid != 1000 || gid != 1000 {
						t.Errorf("%s is owned by %d:%d, want 1000:1000", p, uid, gid)
					}
				}
			}
			cleanup()
			if err := tt.do(agentclient.AsUser(nil)); (err == nil) != tt.byDefault {
				t.Fatalf("as the agent: err = %v, want success %v", err, tt.byDefault)
			}
			if tt.created != "" {
				if uid, _ := ownerOf(t, filepath.Join(home, tt.created)); uid != 0 {
					t.Errorf("without a user, %s is owned by %d, want 0", tt.created, uid)
				}
			}
			cleanup()
		})
	}

	// Move and remove: the other user may not touch the home's entries.
	if err := c.Move(ctx, agentproto.MoveRequest{From: "/home/mine", To: "/home/moved"}, other); err == nil {
		t.Fatal("move as 1001 succeeded")
	}
	if err := c.Move(ctx, agentproto.MoveRequest{From: "/home/mine", To: "/home/moved"}, owner); err != nil {
		t.Fatalf("move as 1000: %v", err)
	}
	if err := c.Remove(ctx, agentproto.RemoveRequest{Path: "/home/moved"}, other); err == nil {
		t.Fatal("remove as 1001 succeeded")
	}
	if err := c.Remove(ctx, agentproto.RemoveRequest{Path: "/home/moved"}, owner); err != nil {
		t.Fatalf("remove as 1000: %v", err)
	}
	// The agent's own IDs are untouched afterwards: it still writes as root.
	for range 20 {
		if _, err := c.WriteFile(ctx, "/root-owned", -1, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if uid, gid := ownerOf(t, filepath.Join(root, "root-owned")); uid != 0 || gid != 0 {
			t.Fatalf("after user calls, an agent write is owned by %d:%d", uid, gid)
		}
	}
}

// TestFileUserBadValue: a malformed user is refused with
// invalid_file_user on every route, and nothing runs.
func TestFileUserBadValue(t *testing.T) {
	root := t.TempDir()
	srv := newServer(t, agent.Options{FilesRoot: root})
	h := srv.Handler()
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/files/stat?path=/", ""},
		{"GET", "/v1/files/list?path=/", ""},
		{"POST", "/v1/files/mkdir", `{"path":"/x"}`},
		{"POST", "/v1/files/move", `{"from":"/a","to":"/b"}`},
		{"POST", "/v1/files/remove", `{"path":"/a"}`},
		{"GET", "/v1/files/content?path=/a", ""},
		{"PUT", "/v1/files/content?path=/a", "data"},
		{"GET", "/v1/files/tar?path=/", ""},
		{"PUT", "/v1/files/tar?path=/t", ""},
		{"GET", "/v1/files/watch?path=/", ""},
	}
	for _, rt := range routes {
		for _, bad := range []string{"user=1000", "user=x:1", "user=4294967295:0", "user=1:1&user=2:2", "user=-1:-1"} {
			t.Run(rt.method+rt.path+"/"+bad, func(t *testing.T) {
				sep := "?"
				if strings.Contains(rt.path, "?") {
					sep = "&"
				}
				req := httptest.NewRequest(rt.method, rt.path+sep+bad, strings.NewReader(rt.body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				var e agentproto.Error
				_ = json.NewDecoder(bufio.NewReader(rec.Body)).Decode(&e)
				if rec.Code != http.StatusBadRequest || e.Code != agentproto.CodeInvalidFileUser {
					t.Fatalf("status %d code %q, want 400 %s", rec.Code, e.Code, agentproto.CodeInvalidFileUser)
				}
			})
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a refused request changed the root: %v", entries)
	}
}

// tarOf is a tar stream of regular files.
func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestFileUserWithoutCapSetuid: an agent that cannot change its
// filesystem IDs (no CAP_SETUID/CAP_SETGID) refuses a user's request
// instead of running it as itself. The test re-runs itself without those
// capabilities (setpriv drops them from the bounding set before exec).
func TestFileUserWithoutCapSetuid(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_NO_SETUID") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root")
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("needs setpriv")
		}
		cmd := exec.Command(setpriv, "--bounding-set", "-setuid,-setgid", os.Args[0], "-test.run=^TestFileUserWithoutCapSetuid$", "-test.v")
		cmd.Env = append(os.Environ(), "AIRLOCK_TEST_NO_SETUID=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestFileUserWithoutCapSetuid") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	c, root, _ := filesAgent(t)
	ctx := context.Background()
	_, err := c.WriteFile(ctx, "/a", -1, strings.NewReader("x"), agentclient.AsUser(&agentproto.FileUser{UID: 1000, GID: 1000}))
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != agentproto.CodeInternal || !strings.Contains(ae.Message, "CAP_SETUID") {
		t.Fatalf("write as 1000 without CAP_SETUID: err = %v, want an internal error naming CAP_SETUID", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "a")); !os.IsNotExist(err) {
		t.Fatalf("the write ran anyway: %v", err)
	}
	// Without a user the agent works as before.
	if _, err := c.WriteFile(ctx, "/b", -1, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
}

// TestFileUserOlderAgent: an agent without FeatureFileUser would ignore
// the user and act as root, so the host refuses to send it one.
func TestFileUserOlderAgent(t *testing.T) {
	c := newClient(t, recordedAgent(t, ""))
	ctx := ctxT(t)
	as := agentclient.AsUser(&agentproto.FileUser{UID: 1000, GID: 1000})
	calls := map[string]func() error{
		"stat":   func() error { _, err := c.Stat(ctx, "/a", as); return err },
		"list":   func() error { _, err := c.ListDir(ctx, "/a", as); return err },
		"mkdir":  func() error { _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/a"}, as); return err },
		"move":   func() error { return c.Move(ctx, agentproto.MoveRequest{From: "/a", To: "/b"}, as) },
		"remove": func() error { return c.Remove(ctx, agentproto.RemoveRequest{Path: "/a"}, as) },
		"read":   func() error { _, _, err := c.ReadFile(ctx, "/a", as); return err },
		"write": func() error {
			_, err := c.WriteFile(ctx, "/a", -1, strings.NewReader("x"), as)
			return err
		},
		"tar-out": func() error { _, err := c.TarOut(ctx, "/a", as); return err },
		"tar-in":  func() error { _, err := c.TarIn(ctx, "/a", strings.NewReader(""), as); return err },
		"watch":   func() error { _, err := c.Watch(ctx, "/a", as); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, agentclient.ErrUnsupported) || !strings.Contains(err.Error(), agentproto.FeatureFileUser) {
			t.Errorf("%s as a user on an older agent: %v, want ErrUnsupported naming %s", name, err, agentproto.FeatureFileUser)
		}
	}
}
