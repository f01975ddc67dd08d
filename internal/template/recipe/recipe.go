// Package recipe builds templates from recipes: a base (a Debian suite
// bootstrapped with mmdebstrap, or an existing template), apt packages,
// files copied from a context directory, commands run inside the tree, and
// the runtime configuration (env, working directory, user) of the result.
//
// Recipes are for administrators: run steps execute as root, chrooted into
// the tree being built, in their own mount, PID, UTS and IPC namespaces but
// with the host's network. That is a build environment, not a sandbox.
package recipe

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Bounds on a recipe.
const (
	maxRecipeBytes = 1 << 20
	maxPackages    = 1000
	maxSteps       = 256
	maxEnv         = 256
	maxArgBytes    = 64 << 10
)

// Recipe is a parsed recipe. It is immutable: its accessors return copies.
type Recipe struct {
	debian   *Debian // the base: a Debian suite, or
	template string  // a template reference (name, name:tag or sha256:…)
	packages []string
	steps    []Step
	env      [][2]string // sorted by name
	workdir  string
	user     string
	start    Start
}

// Start is a recipe's start and ready commands (template.Config's
// StartCmd, ReadyCmd and ReadyTimeoutMS): the build checks them in a
// sandbox of the result and records them in its configuration.
type Start struct {
	Cmd          string
	ReadyCmd     string
	ReadyTimeout time.Duration // 0: template.DefaultReadyTimeout
}

// Debian is a Debian base bootstrapped with mmdebstrap.
type Debian struct {
	Suite   string // e.g. "bookworm"
	Variant string // mmdebstrap --variant, "minbase" when not given
}

// Step is a copy or run step.
type Step struct {
	Copy *Copy    // copy files from the context directory, or
	Run  []string // run this argv inside the tree (a string in the recipe is ["/bin/sh", "-c", it])
	// A run step's user ("name", "uid", "uid:gid", "name:group", as a
	// template's user), working directory (absolute) and environment
	// (NAME=VALUE sorted by name, over the tree's); "": root, "/", none.
	// A run step that sets any of them runs in a build sandbox, also on
	// a Debian base.
	User    string
	Workdir string
	Env     []string
}

// sandboxed reports whether the step runs in a build sandbox on a Debian
// base too (it sets a user, directory or environment of its own).
func (s Step) sandboxed() bool { return s.User != "" || s.Workdir != "" || len(s.Env) > 0 }

// Copy copies Src (relative to the context directory; a file or a
// directory) to Dst (absolute, in the tree). Mode, when not zero, is the
// permission bits of the copied regular files; otherwise they keep their
// executable bits as 0755 or 0644. Directories are 0755, everything is owned
// by root.
type Copy struct {
	Src  string
	Dst  string
	Mode uint32
}

// Base returns the Debian base, or the template reference the recipe
// starts from (exactly one is set).
func (r Recipe) Base() (debian *Debian, template string) {
	if r.debian != nil {
		d := *r.debian
		return &d, ""
	}
	return nil, r.template
}

// Packages returns the apt packages, sorted and without duplicates.
func (r Recipe) Packages() []string { return slices.Clone(r.packages) }

// Steps returns the copy and run steps in order.
func (r Recipe) Steps() []Step {
	out := make([]Step, len(r.steps))
	for i, s := range r.steps {
		out[i] = Step{Run: slices.Clone(s.Run), User: s.User, Workdir: s.Workdir, Env: slices.Clone(s.Env)}
		if s.Copy != nil {
			c := *s.Copy
			out[i].Copy = &c
		}
	}
	return out
}

// Env returns the environment the recipe sets, as NAME=VALUE sorted by name.
func (r Recipe) Env() []string {
	out := make([]string, len(r.env))
	for i, kv := range r.env {
		out[i] = kv[0] + "=" + kv[1]
	}
	return out
}

// Workdir returns the working directory the recipe sets, or "".
func (r Recipe) Workdir() string { return r.workdir }

// User returns the user ("user" or "user:group", names or numbers) the
// recipe sets, or "".
func (r Recipe) User() string { return r.user }

// Start returns the recipe's start and ready commands (zero: none).
func (r Recipe) Start() Start { return r.start }

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the source of the default recipe.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Default returns the recipe of the template named "default": Debian 12
// (bookworm, minbase) with bash, coreutils, python3 (with pip and venv),
// nodejs and npm, git, curl, ca-certificates and procps.
func Default() Recipe {
	r, err := Parse(defaultYAML)
	if err != nil {
		panic("recipe: the embedded default recipe is invalid: " + err.Error())
	}
	return r
}

// The YAML document.
type fileDoc struct {
	From         *fromDoc          `yaml:"from"`
	Packages     []string          `yaml:"packages"`
	Steps        []stepDoc         `yaml:"steps"`
	Env          map[string]string `yaml:"env"`
	Workdir      *string           `yaml:"workdir"`
	User         *string           `yaml:"user"`
	StartCmd     *string           `yaml:"start_cmd"`
	ReadyCmd     *string           `yaml:"ready_cmd"`
	ReadyTimeout *string           `yaml:"ready_timeout"`
}

type fromDoc struct {
	Debian   *debianDoc `yaml:"debian"`
	Template *string    `yaml:"template"`
}

type debianDoc struct {
	Suite   string `yaml:"suite"`
	Variant string `yaml:"variant"`
}

type stepDoc struct {
	Copy    *copyDoc          `yaml:"copy"`
	Run     yaml.Node         `yaml:"run"`
	User    *string           `yaml:"user"`
	Workdir *string           `yaml:"workdir"`
	Env     map[string]string `yaml:"env"`
}

type copyDoc struct {
	Src  string    `yaml:"src"`
	Dst  string    `yaml:"dst"`
	Mode yaml.Node `yaml:"mode"`
}

var (
	suiteRe   = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,63}$`)
	packageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,127}(:[a-z0-9-]{1,32})?(=[A-Za-z0-9.+~:-]{1,128})?$`)
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)
	// userNameRe is a user (or user:group) by name or number, as an
	// image's config names it.
	userNameRe = regexp.MustCompile(`^([a-z_][a-z0-9_.-]{0,31}|[0-9]{1,10})(:([a-z_][a-z0-9_.-]{0,31}|[0-9]{1,10}))?$`)
	variants   = []string{"extract", "custom", "essential", "apt", "required", "minbase", "buildd", "important", "debootstrap", "standard"}
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: recipe: %s", model.ErrInvalid, fmt.Sprintf(format, args...))
}

// Parse parses a recipe (YAML). Unknown fields, a missing or ambiguous base,
// copy sources that are absolute or leave the context directory, relative
// destinations, bad modes and empty commands are errors wrapping
// model.ErrInvalid.
func Parse(data []byte) (Recipe, error) {
	if len(data) > maxRecipeBytes {
		return Recipe{}, invalidf("larger than %d bytes", maxRecipeBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Recipe{}, invalidf("empty document")
		}
		return Recipe{}, invalidf("%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Recipe{}, invalidf("more than one YAML document")
	}
	var r Recipe
	switch {
	case doc.From == nil:
		return Recipe{}, invalidf("from: missing (debian: {suite: …} or template: REF)")
	case (doc.From.Debian == nil) == (doc.From.Template == nil):
		return Recipe{}, invalidf("from: give exactly one of debian and template")
	case doc.From.Debian != nil:
		d := Debian{Suite: doc.From.Debian.Suite, Variant: doc.From.Debian.Variant}
		if !suiteRe.MatchString(d.Suite) {
			return Recipe{}, invalidf("from.debian.suite %q is not a suite name", textclip.Bytes(d.Suite, maxEcho))
		}
		if d.Variant == "" {
			d.Variant = "minbase"
		}
		if !slices.Contains(variants, d.Variant) {
			return Recipe{}, invalidf("from.debian.variant %q is not one of %s", textclip.Bytes(d.Variant, maxEcho), strings.Join(variants, ", "))
		}
		r.debian = &d
	default:
		ref := *doc.From.Template
		if _, err := model.ParseTemplateDigest(ref); err != nil {
			if _, err := model.ParseTemplateRef(ref); err != nil {
				return Recipe{}, invalidf("from.template: %v", err)
			}
		}
		r.template = ref
	}
	if len(doc.Packages) > maxPackages {
		return Recipe{}, invalidf("more than %d packages", maxPackages)
	}
	for _, p := range doc.Packages {
		if !packageRe.MatchString(p) {
			return Recipe{}, invalidf("packages: %q is not a Debian package name", textclip.Bytes(p, maxEcho))
		}
	}
	r.packages = slices.Clone(doc.Packages)
	slices.Sort(r.packages)
	r.packages = slices.Compact(r.packages)

	if len(doc.Steps) > maxSteps {
		return Recipe{}, invalidf("more than %d steps", maxSteps)
	}
	for i, sd := range doc.Steps {
		s, err := parseStep(sd)
		if err != nil {
			return Recipe{}, fmt.Errorf("%w (step %d)", err, i+1)
		}
		r.steps = append(r.steps, s)
	}

	env, err := parseEnv("env", doc.Env)
	if err != nil {
		return Recipe{}, err
	}
	r.env = env
	if doc.Workdir != nil {
		if err := checkWorkdir("workdir", *doc.Workdir); err != nil {
			return Recipe{}, err
		}
		r.workdir = *doc.Workdir
	}
	if doc.User != nil {
		if err := checkUser("user", *doc.User); err != nil {
			return Recipe{}, err
		}
		r.user = *doc.User
	}
	if r.start, err = parseStart(doc); err != nil {
		return Recipe{}, err
	}
	return r, nil
}

// parseStart checks the start and ready commands as a template's
// configuration takes them.
func parseStart(doc fileDoc) (Start, error) {
	var st Start
	if doc.StartCmd != nil {
		if st.Cmd = *doc.StartCmd; st.Cmd == "" {
			return Start{}, invalidf("start_cmd: empty command")
		}
	}
	if doc.ReadyCmd != nil {
		if st.ReadyCmd = *doc.ReadyCmd; st.ReadyCmd == "" {
			return Start{}, invalidf("ready_cmd: empty command")
		}
	}
	if doc.ReadyTimeout != nil {
		d, err := time.ParseDuration(*doc.ReadyTimeout)
		if err != nil || d < time.Millisecond || d > template.MaxReadyTimeout {
			return Start{}, invalidf("ready_timeout %q: want a duration such as 30s, from 1ms to %s", textclip.Bytes(*doc.ReadyTimeout, maxEcho), template.MaxReadyTimeout)
		}
		st.ReadyTimeout = d.Truncate(time.Millisecond)
	}
	c := st.config()
	if err := c.ValidateStart(); err != nil {
		return Start{}, invalidf("%v", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": manifest config."))
	}
	return st, nil
}

// config is st as a template's configuration sets it.
func (st Start) config() template.Config {
	return template.Config{StartCmd: st.Cmd, ReadyCmd: st.ReadyCmd, ReadyTimeoutMS: st.ReadyTimeout.Milliseconds()}
}

// checkUser checks a user as a recipe names one: "uid", "uid:gid", or
// names (resolved against the tree's /etc/passwd and /etc/group).
func checkUser(field, u string) error {
	if !userNameRe.MatchString(u) {
		return invalidf("%s %q must be \"user\" or \"user:group\" (names or numbers)", field, textclip.Bytes(u, maxEcho))
	}
	for n := range strings.SplitSeq(u, ":") {
		if v, err := strconv.ParseUint(n, 10, 64); err == nil && v > 1<<31-2 {
			return invalidf("%s %q: id out of range", field, u)
		}
	}
	return nil
}

// checkWorkdir checks an absolute, clean directory.
func checkWorkdir(field, wd string) error {
	if !path.IsAbs(wd) || path.Clean(wd) != wd || strings.IndexByte(wd, 0) >= 0 || len(wd) > 4096 {
		return invalidf("%s %q must be a clean absolute path", field, textclip.Bytes(wd, maxEcho))
	}
	return nil
}

// parseEnv checks and sorts an environment.
func parseEnv(field string, env map[string]string) ([][2]string, error) {
	if len(env) > maxEnv {
		return nil, invalidf("%s: more than %d variables", field, maxEnv)
	}
	var out [][2]string
	for k, v := range env {
		if !envNameRe.MatchString(k) {
			return nil, invalidf("%s: %q is not a variable name", field, textclip.Bytes(k, maxEcho))
		}
		if strings.IndexByte(v, 0) >= 0 || len(v) > maxArgBytes {
			return nil, invalidf("%s: the value of %s has a NUL byte or is too long", field, k)
		}
		out = append(out, [2]string{k, v})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out, nil
}

func parseStep(sd stepDoc) (Step, error) {
	hasRun := !sd.Run.IsZero()
	if (sd.Copy != nil) == hasRun {
		return Step{}, invalidf("a step is either copy: {…} or run: …")
	}
	if sd.Copy != nil {
		if sd.User != nil || sd.Workdir != nil || sd.Env != nil {
			return Step{}, invalidf("user, workdir and env are options of run steps, not of copy steps")
		}
		c, err := parseCopy(*sd.Copy)
		return Step{Copy: c}, err
	}
	var st Step
	if sd.User != nil {
		if err := checkUser("run step's user", *sd.User); err != nil {
			return Step{}, err
		}
		st.User = *sd.User
	}
	if sd.Workdir != nil {
		if err := checkWorkdir("run step's workdir", *sd.Workdir); err != nil {
			return Step{}, err
		}
		st.Workdir = *sd.Workdir
	}
	env, err := parseEnv("run step's env", sd.Env)
	if err != nil {
		return Step{}, err
	}
	for _, kv := range env {
		st.Env = append(st.Env, kv[0]+"="+kv[1])
	}
	var argv []string
	switch sd.Run.Kind {
	case yaml.ScalarNode:
		var s string
		if err := sd.Run.Decode(&s); err != nil {
			return Step{}, invalidf("run: %v", err)
		}
		if strings.TrimSpace(s) == "" {
			return Step{}, invalidf("run: empty command")
		}
		argv = []string{"/bin/sh", "-c", s}
	case yaml.SequenceNode:
		if err := sd.Run.Decode(&argv); err != nil {
			return Step{}, invalidf("run: %v", err)
		}
		if len(argv) == 0 || argv[0] == "" {
			return Step{}, invalidf("run: empty command")
		}
	default:
		return Step{}, invalidf("run: want a string or a list of strings")
	}
	total := 0
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return Step{}, invalidf("run: an argument contains a NUL byte")
		}
		total += len(a)
	}
	if total > maxArgBytes {
		return Step{}, invalidf("run: command longer than %d bytes", maxArgBytes)
	}
	st.Run = argv
	return st, nil
}

func parseCopy(cd copyDoc) (*Copy, error) {
	src := cd.Src
	if src == "" || strings.IndexByte(src, 0) >= 0 || len(src) > 4096 {
		return nil, invalidf("copy.src %q must be a path in the context directory", textclip.Bytes(src, maxEcho))
	}
	if path.IsAbs(src) {
		return nil, invalidf("copy.src %q is absolute; it must be relative to the context directory", textclip.Bytes(src, maxEcho))
	}
	src = path.Clean(src)
	if src == ".." || strings.HasPrefix(src, "../") {
		return nil, invalidf("copy.src %q leaves the context directory", textclip.Bytes(cd.Src, maxEcho))
	}
	dst := cd.Dst
	if !path.IsAbs(dst) || strings.IndexByte(dst, 0) >= 0 || len(dst) > 4096 {
		return nil, invalidf("copy.dst %q must be an absolute path in the tree", textclip.Bytes(dst, maxEcho))
	}
	dst = path.Clean(dst)
	if dst == "/" {
		return nil, invalidf("copy.dst must not be the root directory")
	}
	c := &Copy{Src: src, Dst: dst}
	if !cd.Mode.IsZero() {
		if cd.Mode.Kind != yaml.ScalarNode {
			return nil, invalidf("copy.mode: want an octal number such as 0644")
		}
		v := cd.Mode.Value
		digits := strings.TrimPrefix(strings.TrimPrefix(v, "0o"), "0")
		if digits == "" {
			digits = "0"
		}
		m, err := strconv.ParseUint(digits, 8, 32)
		if err != nil || m > 0o7777 || m == 0 {
			return nil, invalidf("copy.mode %q: want octal permission bits such as 0644 (nonzero, at most 07777)", textclip.Bytes(v, maxEcho))
		}
		c.Mode = uint32(m)
	}
	return c, nil
}

// maxEcho is how many bytes of a recipe's value an error message quotes (textclip.Bytes).
const maxEcho = 80
