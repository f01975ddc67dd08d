package codeinterp

import (
	"os"
	"path/filepath"
	"slices"
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
	for _, p := range []string{"bash", "ca-certificates", "coreutils", "procps", "python3", "python3-matplotlib", "python3-numpy"} {
		if !slices.Contains(r.Packages(), p) {
			t.Errorf("packages lack %s", p)
		}
	}
	var copied, user bool
	for _, s := range r.Steps() {
		if s.Copy != nil && s.Copy.Src == filepath.Base(ScriptPath) && s.Copy.Dst == GuestCommand && s.Copy.Mode == 0o755 {
			copied = true
		}
		if slices.Equal(s.Run, []string{"/usr/sbin/useradd", "-m", "-u", "1000", "-s", "/bin/bash", "user"}) {
			user = true
		}
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
