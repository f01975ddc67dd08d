package template

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

func testManifest(c Config) Manifest {
	return Manifest{SchemaVersion: ManifestSchemaVersion, Config: c,
		Rootfs: RootfsInfo{Digest: "sha256:bc703171cb80a2b01673a098d7e0ff2388b2616bf025d8348e538f17529d6187", Entries: 1}}
}

// A manifest with start and ready commands survives its canonical
// encoding, and they change its digest.
func TestManifestStartCmdRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.StartCmd, c.ReadyCmd, c.ReadyTimeoutMS = "python3 -m http.server 8000", `[ -f /tmp/ready ]`, 5000
	m := testManifest(c)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ready_cmd":"[ -f /tmp/ready ]","ready_timeout_ms":5000,"start_cmd":"python3 -m http.server 8000","working_dir":"/"`) {
		t.Fatalf("encoding %s: fields missing or not in key order", b)
	}
	back, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config.StartCmd != c.StartCmd || back.Config.ReadyCmd != c.ReadyCmd || back.Config.ReadyTimeout() != 5*time.Second {
		t.Fatalf("round trip: %+v", back.Config)
	}
	d1, _ := m.Digest()
	d2, _ := testManifest(DefaultConfig()).Digest()
	if d1 == d2 {
		t.Fatal("start and ready commands do not change the digest")
	}
	if got := testManifest(DefaultConfig()).Config.ReadyTimeout(); got != DefaultReadyTimeout {
		t.Fatalf("default ready timeout %v", got)
	}
}

func TestManifestStartCmdInvalid(t *testing.T) {
	for name, c := range map[string]Config{
		"NUL in start":        {StartCmd: "a\x00b"},
		"blank ready":         {ReadyCmd: "  \n"},
		"huge start":          {StartCmd: strings.Repeat("x", maxStartCmdBytes+1)},
		"negative timeout":    {ReadyCmd: "true", ReadyTimeoutMS: -1},
		"timeout over max":    {ReadyCmd: "true", ReadyTimeoutMS: MaxReadyTimeout.Milliseconds() + 1},
		"timeout without cmd": {ReadyTimeoutMS: 1000},
	} {
		t.Run(name, func(t *testing.T) {
			base := DefaultConfig()
			c.Env, c.WorkingDir = base.Env, base.WorkingDir
			if _, err := testManifest(c).Encode(); !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("Encode: %v, want ErrInvalid", err)
			}
		})
	}
}

func runScript(t *testing.T, argv []string, dir string) (int, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// The ready wait runs the command until it succeeds, and gives up with
// ReadyTimeoutExit after the timeout.
func TestReadyScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	// Ready on the third run: each run counts a line, ready at 3 (a
	// trailing comment must not break the script).
	c := Config{ReadyCmd: `echo x >> n; [ "$(wc -l < n)" -ge 3 ] # comment`, ReadyTimeoutMS: 5000}
	start := time.Now()
	if code, out := runScript(t, c.ReadyScript(), dir); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if el := time.Since(start); el < 2*ReadyPoll {
		t.Fatalf("ready after %v: did not poll", el)
	}
	never := Config{ReadyCmd: "false", ReadyTimeoutMS: 1000}
	start = time.Now()
	code, out := runScript(t, never.ReadyScript(), dir)
	if code != ReadyTimeoutExit || !strings.Contains(out, "did not succeed within 1s") {
		t.Fatalf("never ready: exit %d, %q", code, out)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("the timeout took %v", el)
	}
	if code, _ := runScript(t, Config{StartCmd: "true"}.ReadyScript(), dir); code != 0 {
		t.Fatalf("no ready command: exit %d", code)
	}
}

// The build's check starts the start command in the background, waits for
// the ready command and prints the start command's output.
func TestCheckScript(t *testing.T) {
	dir := t.TempDir()
	c := Config{StartCmd: "echo hello from start; sleep 0.5; touch started; sleep 30", ReadyCmd: "[ -f started ]", ReadyTimeoutMS: 10000}
	start := time.Now()
	code, out := runScript(t, c.CheckScript(), dir)
	if code != 0 || !strings.Contains(out, "hello from start") || !strings.Contains(out, "the template is ready") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the check waited for the start command to end")
	}
	bad := Config{StartCmd: "echo never", ReadyCmd: "[ -f " + filepath.Join(dir, "nope") + " ]", ReadyTimeoutMS: 1000}
	if code, out := runScript(t, bad.CheckScript(), dir); code != ReadyTimeoutExit || !strings.Contains(out, "never") {
		t.Fatalf("never ready: exit %d: %s", code, out)
	}
}

// The start and ready commands get the template user's HOME, USER and
// LOGNAME from its passwd entry; root and unknown numeric users get none.
func TestStartEnv(t *testing.T) {
	root := writeRoot(t, map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup})
	for _, c := range []struct {
		spec string
		want []string
	}{
		{"app", []string{"HOME=/home/app", "USER=app", "LOGNAME=app"}},
		{"1234:staff", []string{"HOME=/home/app", "USER=app", "LOGNAME=app"}},
		{"root", nil},
		{"4321", nil},
	} {
		u, err := resolveUserEntry(root, c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		d := Defaults{User: &u.ids, UserName: u.name, Home: u.home}
		if got := d.StartEnv(); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: StartEnv %q, want %q", c.spec, got, c.want)
		}
	}
	if got := (Defaults{}).StartEnv(); got != nil {
		t.Errorf("no user: %q", got)
	}
}
