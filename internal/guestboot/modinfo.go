package guestboot

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"
)

// modInfo is what a .ko's .modinfo section says about load order.
type modInfo struct {
	name    string
	depends []string
}

// parseModinfo reads the .modinfo section of an uncompressed kernel module
// (NUL-separated key=value strings).
func parseModinfo(ko []byte) (modInfo, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return modInfo{}, fmt.Errorf("not an ELF module: %w", err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return modInfo{}, fmt.Errorf("no .modinfo section")
	}
	data, err := s.Data()
	if err != nil {
		return modInfo{}, err
	}
	var mi modInfo
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			mi.name = v
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					mi.depends = append(mi.depends, d)
				}
			}
		}
	}
	return mi, nil
}

// modName normalises a module's name as the kernel does ('-' → '_').
func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// loadOrder returns the wanted modules and everything they depend on, each
// after its dependencies, otherwise in the order wanted. deps maps a module
// name to its dependencies.
func loadOrder(want []string, deps func(string) ([]string, error)) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string, []string) error
	visit = func(m string, path []string) error {
		switch state[m] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(path, m), " → "))
		}
		state[m] = 1
		ds, err := deps(m)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := visit(modName(d), append(path, m)); err != nil {
				return err
			}
		}
		state[m] = 2
		order = append(order, m)
		return nil
	}
	for _, m := range want {
		if err := visit(modName(m), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
