// Package staticelf checks that a binary is a statically linked ELF
// executable: one that runs in a root filesystem without a C library or a
// program interpreter (the guest agent, the busybox of the minimal
// template).
package staticelf

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// Errors of Check, wrapped with detail.
var (
	ErrNotELF  = errors.New("not an ELF executable")
	ErrDynamic = errors.New("dynamically linked")
)

// Check checks the ELF image data: an executable (or position-independent
// executable) without a program interpreter and without shared libraries.
func Check(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w (ELF type %v)", ErrNotELF, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: it needs a program interpreter", ErrDynamic)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("%w: it needs shared libraries %v", ErrDynamic, libs)
	}
	return nil
}
