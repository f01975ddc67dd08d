package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/model"
)

// The build cache's hash chain. Every step has a key: the SHA-256 of
//
//	"airlock-recipe-step-v1" NUL parent-key NUL kind NUL canonical-args NUL input NUL
//
// where parent-key is the previous step's key ("" for the base), kind the
// step's kind, canonical-args the JSON encoding of its arguments (fields in
// a fixed order) and input the digest of the files it reads (a copy step's
// source, see source.go; "" otherwise). The debian base's arguments are the
// suite, variant and sorted package list, the host's apt sources (their
// names and contents) and the version of mmdebstrap; a template base's is
// the template digest. So a step's key changes exactly when something it
// or a step before it depends on changes.
const keyMagic = "airlock-recipe-step-v1"

// builderVersion is part of every base key: bump it when what a step
// produces from the same inputs changes (cleanup after mmdebstrap, the run
// environment, …), so that old cache entries are not reused.
const builderVersion = "2"

// Step kinds.
const (
	KindDebian   = "debian"
	KindTemplate = "template"
	KindPackages = "packages"
	KindCopy     = "copy"
	KindRun      = "run"
	KindConfig   = "config"
	// KindStart checks the start and ready commands in a build sandbox of
	// the configured template; its result is that template.
	KindStart = "start"
)

// ErrNoMmdebstrap: a recipe from a Debian base needs mmdebstrap, which is
// not installed.
var ErrNoMmdebstrap = errors.New("mmdebstrap is not installed (apt-get install mmdebstrap)")

// planStep is one step of the chain.
type planStep struct {
	kind string
	key  string

	debian   *Debian
	packages []string
	mirrors  []string // host apt source files given to mmdebstrap
	base     model.TemplateDigest
	copy     *Copy
	copySum  string
	argv     []string
	// sandboxed: a run or packages step on a template base, whose command
	// runs in a build sandbox (sandbox.go), not in the helper's chroot.
	sandboxed bool
	// A sandboxed run step's own user, directory and environment.
	runUser, runDir string
	runEnv          []string
	env             []string
	workdir         string
	user            string
	start           Start
}

// Host paths, variables for tests.
var (
	aptSourcesList = "/etc/apt/sources.list"
	aptSourcesDir  = "/etc/apt/sources.list.d"
)

func stepKey(parent, kind string, args any, input string) string {
	canon, err := json.Marshal(args)
	if err != nil {
		panic(err) // only plain structs of strings
	}
	h := sha256.New()
	for _, f := range []string{keyMagic, parent, kind, string(canon), input} {
		io.WriteString(h, f)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// plan resolves r's base and computes every step's key.
func (b *Builder) plan(ctx context.Context, r Recipe, contextDir string) ([]planStep, error) {
	var steps []planStep
	parent := ""
	add := func(ps planStep, args any, input string) {
		ps.key = stepKey(parent, ps.kind, args, input)
		parent = ps.key
		steps = append(steps, ps)
	}
	if r.debian != nil {
		version, err := mmdebstrapVersion(ctx)
		if err != nil {
			return nil, err
		}
		sources, mirrors, err := hostSources(r.debian.Suite)
		if err != nil {
			return nil, err
		}
		add(planStep{kind: KindDebian, debian: r.debian, packages: r.packages, mirrors: mirrors}, struct {
			Builder    string   `json:"builder"`
			Suite      string   `json:"suite"`
			Variant    string   `json:"variant"`
			Packages   []string `json:"packages"`
			Sources    string   `json:"sources"`
			Mmdebstrap string   `json:"mmdebstrap"`
		}{builderVersion, r.debian.Suite, r.debian.Variant, r.packages, sources, version}, "")
	} else {
		d, err := b.resolve(ctx, r.template)
		if err != nil {
			return nil, err
		}
		add(planStep{kind: KindTemplate, base: d}, struct {
			Builder string `json:"builder"`
			Digest  string `json:"digest"`
		}{builderVersion, string(d)}, "")
		if len(r.packages) > 0 {
			script := "set -e; apt-get update; apt-get install -y --no-install-recommends " + strings.Join(r.packages, " ") +
				"; apt-get clean; rm -rf /var/lib/apt/lists/*"
			argv := []string{"/bin/sh", "-c", script}
			add(planStep{kind: KindPackages, packages: r.packages, argv: argv, sandboxed: true}, struct {
				Packages []string `json:"packages"`
				Sandbox  bool     `json:"sandbox"`
			}{r.packages, true}, "")
		}
	}
	var root *os.Root
	for _, s := range r.steps {
		switch {
		case s.Copy != nil:
			if root == nil {
				if contextDir == "" {
					return nil, fmt.Errorf("%w: the recipe copies files but has no context directory", model.ErrInvalid)
				}
				var err error
				if root, err = os.OpenRoot(contextDir); err != nil {
					return nil, fmt.Errorf("recipe context directory: %w", err)
				}
				defer root.Close()
			}
			sum, err := digestSource(ctx, root, *s.Copy)
			if err != nil {
				return nil, err
			}
			c := *s.Copy
			add(planStep{kind: KindCopy, copy: &c, copySum: sum}, struct {
				Src  string `json:"src"`
				Dst  string `json:"dst"`
				Mode uint32 `json:"mode"`
			}{c.Src, c.Dst, c.Mode}, sum)
		case r.debian == nil || s.sandboxed():
			// In a build sandbox: its key differs from a chroot run's.
			add(planStep{kind: KindRun, argv: slices.Clone(s.Run), sandboxed: true, runUser: s.User, runDir: s.Workdir, runEnv: slices.Clone(s.Env)}, struct {
				Argv    []string `json:"argv"`
				Sandbox bool     `json:"sandbox"`
				User    string   `json:"user,omitempty"`
				Workdir string   `json:"workdir,omitempty"`
				Env     []string `json:"env,omitempty"`
			}{s.Run, true, s.User, s.Workdir, s.Env}, "")
		default:
			add(planStep{kind: KindRun, argv: slices.Clone(s.Run)}, struct {
				Argv []string `json:"argv"`
			}{s.Run}, "")
		}
	}
	st := r.start
	if len(r.env) > 0 || r.workdir != "" || r.user != "" || st != (Start{}) {
		env := r.Env()
		// The start fields are omitted when empty: the keys of recipes
		// without them are what they were before they existed.
		add(planStep{kind: KindConfig, env: env, workdir: r.workdir, user: r.user, start: st}, struct {
			Env          []string `json:"env"`
			Workdir      string   `json:"workdir"`
			User         string   `json:"user"`
			StartCmd     string   `json:"start_cmd,omitempty"`
			ReadyCmd     string   `json:"ready_cmd,omitempty"`
			ReadyTimeout int64    `json:"ready_timeout_ms,omitempty"`
		}{env, r.workdir, r.user, st.Cmd, st.ReadyCmd, st.ReadyTimeout.Milliseconds()}, "")
	}
	if st != (Start{}) {
		// Checked in a sandbox of the configured template, always as
		// the template's user (its configuration says which).
		add(planStep{kind: KindStart, sandboxed: true, start: st}, struct {
			Sandbox bool `json:"sandbox"`
		}{true}, "")
	}
	return steps, nil
}

func (b *Builder) resolve(ctx context.Context, ref string) (model.TemplateDigest, error) {
	if d, err := model.ParseTemplateDigest(ref); err == nil {
		return d, nil
	}
	if b.Resolve == nil {
		return "", fmt.Errorf("%w: recipe base template %q: only digests can be resolved here", model.ErrInvalid, ref)
	}
	d, err := b.Resolve(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("recipe base template %q: %w", ref, err)
	}
	return d, nil
}

// mmdebstrap --version takes about a second (Perl); remember it per binary.
var versions sync.Map // "path size mtime" -> version

func mmdebstrapVersion(ctx context.Context) (string, error) {
	p, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return "", ErrNoMmdebstrap
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", ErrNoMmdebstrap
	}
	id := fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano())
	if v, ok := versions.Load(id); ok {
		return v.(string), nil
	}
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("mmdebstrap --version: %w", err)
	}
	v := strings.TrimSpace(string(out))
	versions.Store(id, v)
	return v, nil
}

// hostSources returns a digest of the host's apt sources (every file apt
// reads: sources.list and sources.list.d/*.list and *.sources, names and
// contents) and those files that mention suite, which mmdebstrap is given
// as its mirrors. With none, mmdebstrap uses deb.debian.org.
func hostSources(suite string) (string, []string, error) {
	files := []string{aptSourcesList}
	ents, err := os.ReadDir(aptSourcesDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("read apt sources: %w", err)
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".list") || strings.HasSuffix(n, ".sources") {
			files = append(files, filepath.Join(aptSourcesDir, n))
		}
	}
	h := sha256.New()
	var mirrors []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read apt sources: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
		if mentionsSuite(string(data), suite) {
			mirrors = append(mirrors, f)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), mirrors, nil
}

func mentionsSuite(sources, suite string) bool {
	for line := range strings.SplitSeq(sources, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if slices.Contains(strings.Fields(line), suite) {
			return true
		}
	}
	return false
}
