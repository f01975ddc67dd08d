package server

import (
	"debug/elf"
	"fmt"
)

// checkStaticAgent refuses an agent binary that is not a static ELF
// executable: it runs inside root filesystems that have no C library (a plain
// `go build` of it links against one when cgo is on), where it would fail
// with a confusing "no such file or directory" from inside the sandbox.
func checkStaticAgent(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("agent binary %s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("agent binary %s is dynamically linked (it needs a program interpreter the sandbox does not have): build it static with CGO_ENABLED=0 go build -o bin/ ./cmd/airlock-agent", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("agent binary %s needs shared libraries %v: build it static with CGO_ENABLED=0", path, libs)
	}
	return nil
}
