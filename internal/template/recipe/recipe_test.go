package recipe

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestDefault(t *testing.T) {
	r := Default()
	d, tpl := r.Base()
	if d == nil || tpl != "" || d.Suite != "bookworm" || d.Variant != "minbase" {
		t.Fatalf("base = %+v %q", d, tpl)
	}
	for _, p := range []string{"bash", "coreutils", "python3", "python3-pip", "python3-venv", "python-is-python3", "nodejs", "npm", "git", "curl",
		"ca-certificates", "procps", "sudo"} {
		if !slices.Contains(r.Packages(), p) {
			t.Errorf("default lacks %s", p)
		}
	}
	// E2B's default user, created by the recipe's first step, allowed to
	// sudo without a password by its second; the template runs as root
	// unless a sandbox asks for a user.
	want := []Step{
		{Run: []string{"/usr/sbin/useradd", "-m", "-u", "1000", "-s", "/bin/bash", "user"}},
		{Run: []string{"/bin/sh", "-c", "echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user && chmod 0440 /etc/sudoers.d/user"}},
	}
	got := r.Steps()
	if len(got) != len(want) {
		t.Fatalf("steps = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Copy != nil || !slices.Equal(got[i].Run, want[i].Run) {
			t.Errorf("step %d = %+v, want %+v", i+1, got[i], want[i])
		}
	}
	if r.User() != "" {
		t.Errorf("user = %q, want the base's (root)", r.User())
	}
}

func TestParseErrors(t *testing.T) {
	for name, src := range map[string]string{
		"empty":              "",
		"no from":            "packages: [bash]\n",
		"both bases":         "from: {debian: {suite: bookworm}, template: minimal}\n",
		"unknown field":      "from: {template: minimal}\nfoo: 1\n",
		"unknown step field": "from: {template: minimal}\nsteps: [{shell: x}]\n",
		"bad suite":          "from: {debian: {suite: 'Book worm'}}\n",
		"bad variant":        "from: {debian: {suite: bookworm, variant: huge}}\n",
		"bad package":        "from: {template: minimal}\npackages: ['-rf']\n",
		"abs src":            "from: {template: minimal}\nsteps: [{copy: {src: /etc/passwd, dst: /x}}]\n",
		"dotdot src":         "from: {template: minimal}\nsteps: [{copy: {src: a/../../x, dst: /x}}]\n",
		"relative dst":       "from: {template: minimal}\nsteps: [{copy: {src: a, dst: x}}]\n",
		"root dst":           "from: {template: minimal}\nsteps: [{copy: {src: a, dst: /}}]\n",
		"bad mode":           "from: {template: minimal}\nsteps: [{copy: {src: a, dst: /a, mode: 0999}}]\n",
		"big mode":           "from: {template: minimal}\nsteps: [{copy: {src: a, dst: /a, mode: 017777}}]\n",
		"empty run":          "from: {template: minimal}\nsteps: [{run: '  '}]\n",
		"empty argv":         "from: {template: minimal}\nsteps: [{run: []}]\n",
		"both kinds":         "from: {template: minimal}\nsteps: [{run: ls, copy: {src: a, dst: /a}}]\n",
		"bad env":            "from: {template: minimal}\nenv: {'A=B': c}\n",
		"rel workdir":        "from: {template: minimal}\nworkdir: x\n",
		"bad user":           "from: {template: minimal}\nuser: 'Root User'\n",
		"big uid":            "from: {template: minimal}\nuser: '4294967295'\n",
		"copy with user":     "from: {template: minimal}\nsteps: [{copy: {src: a, dst: /a}, user: root}]\n",
		"run rel workdir":    "from: {template: minimal}\nsteps: [{run: ls, workdir: x}]\n",
		"run bad user":       "from: {template: minimal}\nsteps: [{run: ls, user: 'a b'}]\n",
		"run bad env":        "from: {template: minimal}\nsteps: [{run: ls, env: {'1A': b}}]\n",
		"two docs":           "from: {template: minimal}\n---\nfrom: {template: minimal}\n",
		"bad template":       "from: {template: 'Not A Name!'}\n",
		"duplicate key":      "from: {template: minimal}\nfrom: {template: x}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(src)); !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("Parse = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestParse(t *testing.T) {
	r, err := Parse([]byte(`
from:
  template: minimal
packages: [git, curl, git]
steps:
  - copy: {src: ./app/, dst: /opt/app/, mode: 0755}
  - run: echo hi
  - run: [/bin/true, x]
  - {run: id, user: user, workdir: /home/user, env: {Z: "1", Y: "2"}}
env: {B: "2", A: "1"}
workdir: /opt/app
user: "1000:1000"
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, tpl := r.Base(); tpl != "minimal" {
		t.Errorf("template = %q", tpl)
	}
	if got := r.Packages(); !slices.Equal(got, []string{"curl", "git"}) {
		t.Errorf("packages = %q", got)
	}
	s := r.Steps()
	if len(s) != 4 || s[3].User != "user" || s[3].Workdir != "/home/user" || !slices.Equal(s[3].Env, []string{"Y=2", "Z=1"}) || s[1].User != "" {
		t.Errorf("run step options: %+v", s)
	}
	if len(s) != 4 || *s[0].Copy != (Copy{Src: "app", Dst: "/opt/app", Mode: 0o755}) ||
		!slices.Equal(s[1].Run, []string{"/bin/sh", "-c", "echo hi"}) || !slices.Equal(s[2].Run, []string{"/bin/true", "x"}) {
		t.Errorf("steps = %+v", s)
	}
	if got := r.Env(); !slices.Equal(got, []string{"A=1", "B=2"}) {
		t.Errorf("env = %q", got)
	}
	if r.Workdir() != "/opt/app" || r.User() != "1000:1000" {
		t.Errorf("workdir %q user %q", r.Workdir(), r.User())
	}
}

func FuzzParse(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte("from: {template: minimal}\nsteps: [{copy: {src: a, dst: /a, mode: 0644}}, {run: ls}]\nenv: {A: b}\nuser: '1'\n"))
	f.Add([]byte("from: {template: minimal}\nstart_cmd: x\nready_cmd: '[ -f /r ]'\nready_timeout: 5s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		d, tpl := r.Base()
		if (d == nil) == (tpl == "") {
			t.Fatalf("base: %v %q", d, tpl)
		}
		for _, s := range r.Steps() {
			if (s.Copy == nil) == (len(s.Run) == 0) {
				t.Fatalf("step %+v", s)
			}
		}
		// What a recipe accepts, a template's configuration accepts.
		if err := r.Start().config().ValidateStart(); err != nil {
			t.Fatalf("start %+v: %v", r.Start(), err)
		}
	})
}

// TestParseDocExample parses the example of docs/templates.md.
func TestParseDocExample(t *testing.T) {
	data, err := os.ReadFile("../../../docs/templates.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml example in docs/templates.md")
	}
	r, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps()) != 4 || r.User() != "1000:1000" {
		t.Errorf("parsed %+v", r)
	}
}
