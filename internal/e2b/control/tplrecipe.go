package control

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// E2B template steps as Airlock recipes.
//
// The SDK's Template() sends a base (fromTemplate, fromImage) and a list
// of steps (TemplateStep: type, args, filesHash). Each becomes recipe steps
// (internal/template/recipe), whose run steps run in build sandboxes of the
// step's parent, as the E2B builder runs them:
//
//   - RUN [cmd, user?]: a run step `/bin/sh -c cmd` as user (default: the
//     current USER) in the current WORKDIR with the ENV set so far.
//   - ENV [k1, v1, k2, v2, …]: sets variables for later steps and the
//     template's environment.
//   - WORKDIR [dir]: the current directory (relative: to the current one),
//     made (owned by the current user) by a run step as root, and the
//     template's working directory.
//   - USER [user]: the current user, and the template's user.
//   - COPY [src, dest, user?, mode?] + filesHash: the uploaded archive of
//     src (extracted into the build's context directory) is copied to dest
//     (relative: to the current WORKDIR) as Docker's COPY does: a directory
//     src's contents into dest; a file into dest, or into the directory
//     dest when dest ends with "/" (or is "."), or when src is a glob (each
//     match into dest/); files are then given to user (default: the
//     current user) by a run step as root (chown -hR); mode sets the
//     files' permission bits.
//
// startCmd and readyCmd become the recipe's start_cmd and ready_cmd (a
// sandbox of the template starts the one and waits for the other; the
// build checks both), and make the builder's current user and directory
// the template's, as whom they run.
//
// makeDir, makeSymlink, remove, rename, aptInstall, pipInstall and
// npmInstall are RUN steps the SDK makes itself. The E2B builder starts
// as user "user" in /home/user when the base has that account (Airlock's
// default and code-interpreter templates do), else as root in /.

// tplStep is E2B's TemplateStep (forceUpload, resolveSymlinks and gzip,
// which the SDK also sends, are the client's business).
type tplStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force,omitempty"`
}

// tplBuildStart is E2B's TemplateBuildStartV2.
type tplBuildStart struct {
	Force             bool            `json:"force,omitempty"`
	FromImage         *string         `json:"fromImage,omitempty"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry,omitempty"`
	FromTemplate      *string         `json:"fromTemplate,omitempty"`
	ReadyCmd          *string         `json:"readyCmd,omitempty"`
	StartCmd          *string         `json:"startCmd,omitempty"`
	Steps             []tplStep       `json:"steps"`
}

// maxTplSteps bounds a build's steps (the recipe's own bound is 256; a
// COPY may take two).
const maxTplSteps = 120

// maxJoinedRun bounds a run step joined of several RUNs (the recipe's
// bound on a command is 64 KiB).
const maxJoinedRun = 32 << 10

// e2bBaseImage is the image of the SDK's fromBaseImage().
const e2bBaseImage = "e2bdev/base"

// recipeDoc is the recipe a build sends natively (JSON is YAML).
type recipeDoc struct {
	From    recipeFrom        `json:"from"`
	Steps   []recipeStep      `json:"steps,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	User    string            `json:"user,omitempty"`
	// The start and ready commands (startCmd, readyCmd).
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`
}

type recipeFrom struct {
	Template string `json:"template"`
}

type recipeStep struct {
	Copy    *recipeCopy       `json:"copy,omitempty"`
	Run     string            `json:"run,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

type recipeCopy struct {
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	Mode string `json:"mode,omitempty"`
}

// tplBase is what the translation knows of the base: its native
// reference and whether it has E2B's user "user".
type tplBase struct {
	Ref     string
	HasUser bool
}

// tplFiles places a COPY step's files: the archive uploaded for filesHash,
// extracted, then each source laid out under the build's context
// directory as recipe copy sources. lay returns, for step i, the
// (context-relative source, destination directory, destination) of each.
type tplFiles interface {
	lay(i int, filesHash, src, dest string) ([][3]string, error)
}

// e2bUser is the account E2B's builder and SDKs run as.
const e2bUser = "user"

// translate turns a build start into a recipe on base. It refuses what it
// cannot build with a 400 naming the step (1-based, as the SDK counts).
func translate(start tplBuildStart, base tplBase, files tplFiles) (recipeDoc, error) {
	if len(start.Steps) > maxTplSteps {
		return recipeDoc{}, badRequest("more than %d steps", maxTplSteps)
	}
	doc := recipeDoc{From: recipeFrom{Template: base.Ref}}
	user, wd := "root", "/"
	if base.HasUser {
		user, wd = e2bUser, "/home/"+e2bUser
	}
	env := map[string]string{}
	setWD, setUser := false, false
	abs := func(p string) string {
		if path.IsAbs(p) {
			return path.Clean(p)
		}
		return path.Join(wd, p)
	}
	// run adds a run step, or, when the step before is a run as the same
	// user in the same directory with the same environment, joins it to
	// that one ("(a) && (b)": each in a subshell, as each RUN starts
	// anew): one build sandbox for both.
	run := func(cmd, as, dir string) {
		if n := len(doc.Steps); n > 0 {
			last := &doc.Steps[n-1]
			if last.Copy == nil && last.User == as && last.Workdir == dir && maps.Equal(last.Env, env) &&
				len(last.Run)+len(cmd) < maxJoinedRun {
				last.Run = "(" + last.Run + ") && (" + cmd + ")"
				return
			}
		}
		s := recipeStep{Run: cmd, User: as, Workdir: dir}
		if len(env) > 0 {
			s.Env = maps.Clone(env)
		}
		doc.Steps = append(doc.Steps, s)
	}
	for i, st := range start.Steps {
		n := i + 1
		switch strings.ToUpper(st.Type) {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
				return recipeDoc{}, badRequest("step %d RUN: want [command, user?]", n)
			}
			as := user
			if len(st.Args) == 2 && st.Args[1] != "" {
				as = st.Args[1]
			}
			run(st.Args[0], as, wd)
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return recipeDoc{}, badRequest("step %d ENV: want name, value pairs", n)
			}
			for j := 0; j < len(st.Args); j += 2 {
				env[st.Args[j]] = st.Args[j+1]
			}
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return recipeDoc{}, badRequest("step %d WORKDIR: want [directory]", n)
			}
			prev := wd
			wd, setWD = abs(st.Args[0]), true
			if wd != "/" {
				cmd := "mkdir -p -- " + shellQuote(wd)
				if user != "root" {
					cmd += " && chown -- " + shellQuote(user) + " " + shellQuote(wd)
				}
				run(cmd, "root", prev) // in the directory before: wd does not exist yet
			}
		case "USER":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return recipeDoc{}, badRequest("step %d USER: want [user]", n)
			}
			user, setUser = st.Args[0], true
		case "COPY":
			if len(st.Args) < 2 || st.Args[0] == "" || st.Args[1] == "" {
				return recipeDoc{}, badRequest("step %d COPY: want [src, dest, user?, mode?]", n)
			}
			if st.FilesHash == "" {
				return recipeDoc{}, badRequest("step %d COPY: filesHash is missing", n)
			}
			dest := abs(st.Args[1])
			if strings.HasSuffix(st.Args[1], "/") || st.Args[1] == "." {
				dest += "/"
			}
			var mode string
			if len(st.Args) > 3 && st.Args[3] != "" {
				m, err := strconv.ParseUint(st.Args[3], 8, 32)
				if err != nil || m == 0 || m > 0o7777 {
					return recipeDoc{}, badRequest("step %d COPY: mode %q is not octal permission bits", n, st.Args[3])
				}
				mode = fmt.Sprintf("0%o", m)
			}
			pairs, err := files.lay(i, st.FilesHash, st.Args[0], dest)
			if err != nil {
				return recipeDoc{}, fmt.Errorf("step %d COPY: %w", n, err)
			}
			owner := user
			if len(st.Args) > 2 && st.Args[2] != "" {
				owner = st.Args[2]
			}
			var chown []string
			for _, p := range pairs {
				doc.Steps = append(doc.Steps, recipeStep{Copy: &recipeCopy{Src: p[0], Dst: p[1], Mode: mode}})
				chown = append(chown, shellQuote(p[2]))
			}
			if owner != "root" && len(chown) > 0 {
				run("chown -hR -- "+shellQuote(owner)+" "+strings.Join(chown, " "), "root", wd)
			}
		default:
			return recipeDoc{}, badRequest("step %d: step type %q is not supported by Airlock", n, st.Type)
		}
	}
	if len(env) > 0 {
		doc.Env = env
	}
	if setWD {
		doc.Workdir = wd
	}
	startCmd, readyCmd := deref(start.StartCmd), deref(start.ReadyCmd)
	if strings.TrimSpace(startCmd) == "" && startCmd != "" || strings.TrimSpace(readyCmd) == "" && readyCmd != "" {
		return recipeDoc{}, badRequest("startCmd and readyCmd must not be blank")
	}
	if startCmd != "" || readyCmd != "" {
		// E2B runs them as the builder's last user in its last
		// directory: the template's, which Airlock's start and ready
		// commands run as.
		doc.StartCmd, doc.ReadyCmd = startCmd, readyCmd
		setWD, setUser = true, true
	}
	if setWD {
		doc.Workdir = wd
	}
	if setUser {
		doc.User = user
	}
	return doc, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// layCopy lays out a COPY's sources, found in the extracted archive
// below extracted, under the context directory ctxDir as dir "s<i>-<k>"
// holding one entry named as its destination, and returns (that dir,
// destination's parent, destination) for each: recipe copies of a directory, whose
// entries (symlinks included) are copied as they are. dest ends with "/"
// when it names a directory.
func layCopy(ctxDir, extracted string, i int, src, dest string) ([][3]string, error) {
	src = path.Clean(strings.TrimPrefix(src, "./"))
	if path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../") {
		return nil, badRequest("source %q must be relative to the file context", src)
	}
	glob := strings.ContainsAny(src, "*?[")
	var matches []string
	if glob {
		m, err := filepath.Glob(filepath.Join(extracted, filepath.FromSlash(src)))
		if err != nil {
			return nil, badRequest("source %q: %v", src, err)
		}
		for _, p := range m {
			rel, err := filepath.Rel(extracted, p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue
			}
			matches = append(matches, filepath.ToSlash(rel))
		}
	} else if _, err := os.Lstat(filepath.Join(extracted, filepath.FromSlash(src))); err == nil {
		matches = []string{src}
	}
	if len(matches) == 0 {
		return nil, badRequest("no uploaded file matches %q (was it uploaded?)", src)
	}
	dir := strings.HasSuffix(dest, "/") || glob
	dest = path.Clean(dest)
	var out [][3]string
	for k, m := range matches {
		full := filepath.Join(extracted, filepath.FromSlash(m))
		fi, err := os.Lstat(full)
		if err != nil {
			return nil, err
		}
		to := dest
		if dir && !(fi.IsDir() && !glob) {
			to = path.Join(dest, path.Base(m))
		}
		if to == "/" {
			// A directory's contents into /: each entry on its own.
			ents, err := os.ReadDir(full)
			if err != nil {
				return nil, err
			}
			for _, e := range ents {
				p, err := layOne(ctxDir, fmt.Sprintf("s%d-%d-%s", i, k, e.Name()), filepath.Join(full, e.Name()), "/"+e.Name())
				if err != nil {
					return nil, err
				}
				out = append(out, p)
			}
			continue
		}
		p, err := layOne(ctxDir, fmt.Sprintf("s%d-%d", i, k), full, to)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// layOne moves from into ctxDir/name/<base of to> and returns the pair.
func layOne(ctxDir, name, from, to string) ([3]string, error) {
	d := filepath.Join(ctxDir, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return [3]string{}, err
	}
	if err := os.Rename(from, filepath.Join(d, path.Base(to))); err != nil {
		return [3]string{}, err
	}
	return [3]string{name, path.Dir(to), to}, nil
}
