package template

import (
	"fmt"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Bounds on the process fields of a manifest's Config.
const (
	maxConfigArgs     = 4096      // entries of Cmd, and of Entrypoint
	maxConfigArgBytes = 128 << 10 // bytes of Cmd plus Entrypoint
	maxConfigUserLen  = 256
)

// validateProcess checks the fields that come from image configs.
func (c Config) validateProcess() error {
	total := 0
	for _, f := range []struct {
		name string
		args []string
	}{{"cmd", c.Cmd}, {"entrypoint", c.Entrypoint}} {
		if len(f.args) > maxConfigArgs {
			return fmt.Errorf("%w: manifest config.%s has more than %d entries", model.ErrInvalid, f.name, maxConfigArgs)
		}
		for _, a := range f.args {
			if strings.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("%w: manifest config.%s entry %q contains a NUL byte", model.ErrInvalid, f.name, textclip.Bytes(a, maxEcho))
			}
			total += len(a)
		}
	}
	if total > maxConfigArgBytes {
		return fmt.Errorf("%w: manifest config.cmd and config.entrypoint are longer than %d bytes", model.ErrInvalid, maxConfigArgBytes)
	}
	if err := c.ValidateStart(); err != nil {
		return err
	}
	if len(c.User) > maxConfigUserLen || strings.ContainsFunc(c.User, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: manifest config.user %q must be at most %d printable bytes", model.ErrInvalid, textclip.Bytes(c.User, maxEcho), maxConfigUserLen)
	}
	return nil
}

// configFromImage turns an OCI image config into a template Config: Env
// (with the default PATH added when the image sets none, as container
// runtimes do), WorkingDir ("/" when unset), User, Entrypoint and Cmd.
func configFromImage(ic v1.Config) (Config, error) {
	c := Config{
		Env:        append([]string(nil), ic.Env...),
		User:       ic.User,
		Entrypoint: append([]string(nil), ic.Entrypoint...),
		Cmd:        append([]string(nil), ic.Cmd...),
		WorkingDir: "/",
	}
	hasPath := false
	for _, kv := range c.Env {
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
	}
	if !hasPath {
		c.Env = append(c.Env, DefaultConfig().Env...)
	}
	if wd := ic.WorkingDir; wd != "" {
		if !path.IsAbs(wd) {
			return Config{}, rejectf("image config: working directory %q is not absolute", textclip.Bytes(wd, maxEcho))
		}
		c.WorkingDir = path.Clean(wd)
	}
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("image config: %w", err)
	}
	return c, nil
}
