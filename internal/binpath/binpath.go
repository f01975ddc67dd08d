// Package binpath finds Airlock's other binaries (airlock-agent,
// airlock-bench, airlock) the one way every binary looks for them: next to
// the running executable, then in PATH.
package binpath

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Find returns the absolute path of the executable name: the file of that
// name in the running executable's directory, else the first one in PATH.
// The error says where it looked and wraps exec.ErrNotFound.
func Find(name string) (string, error) {
	beside := Beside(name)
	if beside != "" {
		if st, err := os.Stat(beside); err == nil && !st.IsDir() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	if beside == "" {
		return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
	}
	return "", fmt.Errorf("%s is not next to this executable (%s): %w", name, beside, exec.ErrNotFound)
}

// Beside is the path name has in the running executable's directory, ""
// when the executable's own path is unknown.
func Beside(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), name)
}
