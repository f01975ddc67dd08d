package codeinterp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/template/recipe"
)

// The template's recipe installs the server where GuestCommand says, with
// what it needs, and E2B's user.
func TestCodeInterpreterRecipe(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", filepath.Dir(ScriptPath), "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Parse(src)
	if err != nil {
		t.Fatalf("recipe.yaml: %v", err)
	}
	if d, _ := r.Base(); d == nil || d.Suite != "bookworm" || d.Variant != "minbase" {
		t.Errorf("base %+v, want Debian bookworm minbase", d)
	}
	for _, p := range []string{"bash", "ca-certificates", "coreutils", "procps", "python3", "python3-matplotlib", "python3-numpy",
		"python3-pandas", "nodejs", "node-typescript"} {
		if !slices.Contains(r.Packages(), p) {
			t.Errorf("packages lack %s", p)
		}
	}
	var copied, user bool
	helpers := map[string]bool{}
	for _, s := range r.Steps() {
		if s.Copy != nil && s.Copy.Src == filepath.Base(ScriptPath) && s.Copy.Dst == GuestCommand && s.Copy.Mode == 0o755 {
			copied = true
		}
		// The server's helpers, where it looks for them (HELPER_DIRS).
		if s.Copy != nil && s.Copy.Dst == HelperDir+"/"+s.Copy.Src {
			helpers[s.Copy.Src] = true
			if _, err := os.Stat(filepath.Join("..", "..", "..", filepath.Dir(ScriptPath), s.Copy.Src)); err != nil {
				t.Errorf("copy of %s: %v", s.Copy.Src, err)
			}
		}
		if slices.Equal(s.Run, []string{"/usr/sbin/useradd", "-m", "-u", "1000", "-s", "/bin/bash", "user"}) {
			user = true
		}
	}
	for _, h := range []string{"worker.py", "display.py", "node_worker.js"} {
		if !helpers[h] {
			t.Errorf("%s is not copied to %s", h, HelperDir)
		}
	}
	if script, err := os.ReadFile(filepath.Join("..", "..", "..", ScriptPath)); err != nil || !strings.Contains(string(script), `"`+HelperDir+`"`) {
		t.Errorf("server.py does not look for its helpers in %s (%v)", HelperDir, err)
	}
	if !copied || !user {
		t.Errorf("steps %+v: server copied to %s: %v, user 1000 created: %v", r.Steps(), GuestCommand, copied, user)
	}
	if env := r.Env(); !slices.Contains(env, "MPLBACKEND=Agg") || !slices.Contains(env, "PYTHONUNBUFFERED=1") {
		t.Errorf("env %v", env)
	}
	if r.User() != "" {
		t.Errorf("user %q: the template's default user must stay root", r.User())
	}
}
