package server

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlockdev/airlock/internal/staticelf"
)

// checkStaticAgent refuses an agent binary that is not a static ELF
// executable: it runs inside root filesystems that have no C library (a plain
// `go build` of it links against one when cgo is on), where it would fail
// with a confusing "no such file or directory" from inside the sandbox.
func checkStaticAgent(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	switch err := staticelf.Check(data); {
	case errors.Is(err, staticelf.ErrDynamic):
		return fmt.Errorf("agent binary %s is %v, which sandboxes lack: build it static with CGO_ENABLED=0 go build -o bin/ ./cmd/airlock-agent", path, err)
	case err != nil:
		return fmt.Errorf("agent binary %s: %w", path, err)
	}
	return nil
}
