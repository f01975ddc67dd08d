package template

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

const (
	testPasswd = "# users\nroot:x:0:0:root:/root:/bin/sh\napp:x:1234:2345:App:/home/app:/bin/sh\nbad:x:notanumber:1::/:/bin/sh\n"
	testGroup  = "root:x:0:\nstaff:x:50:app\napp:x:2345:\n"
)

func writeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestResolveUser(t *testing.T) {
	root := writeRoot(t, map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup})
	for _, c := range []struct {
		user    string
		want    model.UserIDs
		wantErr string
	}{
		{user: "app", want: model.UserIDs{UID: 1234, GID: 2345}},
		{user: "1234", want: model.UserIDs{UID: 1234, GID: 2345}},
		{user: "root", want: model.UserIDs{}},
		{user: "4321", want: model.UserIDs{UID: 4321}}, // numeric, not in passwd: group 0
		{user: "4321:77", want: model.UserIDs{UID: 4321, GID: 77}},
		{user: "app:staff", want: model.UserIDs{UID: 1234, GID: 50}},
		{user: "app:0", want: model.UserIDs{UID: 1234}},
		{user: "1234:staff", want: model.UserIDs{UID: 1234, GID: 50}},
		{user: "ghost", wantErr: "no such user"},
		{user: "app:ghosts", wantErr: `no group "ghosts"`},
		{user: "bad", wantErr: "malformed"},
		{user: "app:", wantErr: "user[:group]"},
		{user: ":staff", wantErr: "user[:group]"},
		{user: "4294967295", wantErr: "no such user"}, // out of range: taken as a name
	} {
		got, err := resolveUser(root, c.user)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("resolveUser(%q) = %v, %v; want error containing %q", c.user, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("resolveUser(%q) = %v, %v; want %v", c.user, got, err, c.want)
		}
	}
}

func TestResolveUserWithoutEtc(t *testing.T) {
	root := t.TempDir()
	if got, err := resolveUser(root, "1000"); err != nil || got != (model.UserIDs{UID: 1000}) {
		t.Errorf("numeric user without /etc/passwd = %v, %v", got, err)
	}
	if got, err := resolveUser(root, "1000:1000"); err != nil || got != (model.UserIDs{UID: 1000, GID: 1000}) {
		t.Errorf("numeric user:group without /etc files = %v, %v", got, err)
	}
	if _, err := resolveUser(root, "app"); err == nil || !strings.Contains(err.Error(), "no /etc/passwd") {
		t.Errorf("named user without /etc/passwd: %v", err)
	}
	if _, err := resolveUser(root, "1000:staff"); err == nil || !strings.Contains(err.Error(), "no /etc/group") {
		t.Errorf("named group without /etc/group: %v", err)
	}
}

// The template's /etc files are read inside its tree only: a symbolic link
// out of it is not followed, and a FIFO does not block.
func TestResolveUserStaysInTheTree(t *testing.T) {
	outside := writeRoot(t, map[string]string{"passwd": "app:x:1:1::/:/bin/sh\n"})
	for name, link := range map[string]string{
		"absolute": filepath.Join(outside, "passwd"),
		"relative": "../../../../../../../../" + filepath.Join(outside, "passwd"),
	} {
		root := t.TempDir()
		if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(link, filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
		if got, err := resolveUser(root, "app"); err == nil {
			t.Errorf("%s symlink out of the tree: resolved to %v", name, got)
		}
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "etc/passwd"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := resolveUser(root, "app"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO /etc/passwd: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resolveUser blocked on a FIFO /etc/passwd")
	}
}

// An image's config becomes the template's Defaults, its user resolved
// against the image's own /etc files; a user it lacks is reported, not
// refused.
func TestStoreDefaults(t *testing.T) {
	s, tmp := newStore(t)
	etc := makeTar(t, dirEntry("etc/"), reg("etc/passwd", testPasswd), reg("etc/group", testGroup), dirEntry("work/"))
	cfg := v1.Config{Env: []string{"A=tpl", "PATH=/opt/bin"}, WorkingDir: "/work", User: "app:staff",
		Entrypoint: []string{"/bin/entry"}, Cmd: []string{"serve"}}
	imp, err := importLayout(t, s, tmp, imageOf(t, "", cfg, etc))
	if err != nil {
		t.Fatal(err)
	}
	def, err := s.Defaults(imp.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(def.Config.Env, cfg.Env) || def.Config.WorkingDir != "/work" || def.Config.User != "app:staff" ||
		!slices.Equal(def.Config.Entrypoint, cfg.Entrypoint) || !slices.Equal(def.Config.Cmd, cfg.Cmd) {
		t.Errorf("Config = %+v", def.Config)
	}
	if def.UserErr != nil || def.User == nil || *def.User != (model.UserIDs{UID: 1234, GID: 50}) {
		t.Errorf("User = %v, UserErr = %v; want 1234:50", def.User, def.UserErr)
	}
	again, err := s.Defaults(imp.Digest)
	if err != nil || again.User != def.User {
		t.Errorf("second Defaults not served from the cache: %v", err)
	}

	cfg.User = "ghost"
	imp, err = importLayout(t, s, tmp, imageOf(t, "", cfg, etc))
	if err != nil {
		t.Fatal(err)
	}
	def, err = s.Defaults(imp.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if def.User != nil || def.UserErr == nil || !strings.Contains(def.UserErr.Error(), `the template's user "ghost": no such user`) {
		t.Errorf("unknown user: User = %v, UserErr = %v", def.User, def.UserErr)
	}

	if _, err := s.Defaults(model.DigestFromSHA256([32]byte{1})); err == nil {
		t.Error("Defaults of a missing template succeeded")
	}
}

// Templates imported from a directory keep the default config: no user,
// "/" and the default PATH.
func TestStoreDefaultsOfDirectoryImport(t *testing.T) {
	s, _ := newStore(t)
	imp, err := s.ImportDir(t.Context(), makeSample(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	def, err := s.Defaults(imp.Digest)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	if def.User != nil || def.UserErr != nil || def.Config.WorkingDir != want.WorkingDir || !slices.Equal(def.Config.Env, want.Env) {
		t.Errorf("Defaults = %+v", def)
	}
}
