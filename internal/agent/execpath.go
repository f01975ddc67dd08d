package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultPath is the PATH a process gets when neither the agent's
// environment nor the request sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// mergeEnv returns base with every entry of extra added; an entry of extra
// replaces the entry of base with the same name. Order is kept: base's names
// first, then new names from extra. A PATH is added if none is set.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra)+1)
	index := make(map[string]int, len(base)+len(extra))
	add := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := index[name]; ok {
			out[i] = kv
			return
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		add(kv)
	}
	for _, kv := range extra {
		add(kv)
	}
	if _, ok := index["PATH"]; !ok {
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
