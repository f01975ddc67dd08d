package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// DefaultPath is the PATH a process gets when neither the agent's
// environment nor the request sets one.
const DefaultPath = model.DefaultPath

// mergeEnv returns base with every entry of extra added (model.SetEnv: an
// entry of extra replaces the entry of base with the same name; base's names
// first, then new names from extra). A PATH is added if none is set.
func mergeEnv(base, extra []string) []string {
	out := model.SetEnv(base, extra)
	if !slices.ContainsFunc(out, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "PATH"
	}) {
		out = append(out, "PATH="+DefaultPath)
	}
	return out
}

// envValue returns the value of name in env ("" if unset).
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// errNotFound is returned by lookPath when no PATH entry holds the file.
var errNotFound = errors.New("executable file not found in PATH")

// lookPath resolves file the way execvp does, but with the PATH of the
// process being started (pathEnv) and relative to its working directory
// cwd. A name containing a slash is used as is (relative to cwd).
func lookPath(file, pathEnv, cwd string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return file, nil
	}
	var firstErr error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		check := p
		if !filepath.IsAbs(check) {
			check = filepath.Join(cwd, check)
		}
		err := checkExecutable(check)
		if err == nil {
			if !strings.Contains(p, "/") {
				p = "./" + p // execve must not see a bare name
			}
			return p, nil
		}
		if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
			firstErr = fmt.Errorf("%s: %w", p, err)
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("%q: %w (PATH=%s)", file, errNotFound, pathEnv)
}

// errNotExecutable is returned for files without any execute bit and for
// directories.
var errNotExecutable = errors.New("not an executable file")

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%w (mode %s)", errNotExecutable, fi.Mode())
	}
	return nil
}
