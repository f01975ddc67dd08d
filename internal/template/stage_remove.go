package template

import (
	"fmt"
	"io/fs"
	"strings"
)

// Removal of staged entries, for image layers' whiteouts, opaque
// directories and changes of an entry's type. Like every other write it
// goes through the stager's os.Root and only touches entries the stager
// made, found through directories it made.

// lookup reports the kind of entry rel, 0 if it does not exist. An ancestor
// that exists but is not a directory is refused: nothing is ever looked up,
// let alone removed, through a symlink or a file.
func (s *stager) lookup(rel string) (kind, error) {
	for i := 0; i < len(rel); i++ {
		if rel[i] != '/' {
			continue
		}
		switch s.kinds[rel[:i]] {
		case kindDir:
		case 0:
			return 0, nil
		default:
			return 0, rejectf("%s: parent %s is not a directory (reaching through a symlink or file is not allowed)", rel, rel[:i])
		}
	}
	return s.kinds[rel], nil
}

// children returns the names in staged directory rel.
func (s *stager) children(rel string) ([]string, error) {
	if s.kinds[rel] != kindDir {
		return nil, nil
	}
	ents, err := fs.ReadDir(s.root.FS(), rel)
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", rel, err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// remove deletes staged entry rel, with everything below it if it is a
// directory, and forgets it. It does nothing if rel does not exist.
func (s *stager) remove(rel string) error {
	if rel == "." {
		return rejectf("the root of the tree cannot be removed")
	}
	switch s.kinds[rel] {
	case 0:
		return nil
	case kindDir:
		var below []string
		err := fs.WalkDir(s.root.FS(), rel, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			below = append(below, p)
			return nil
		})
		if err != nil {
			return fmt.Errorf("remove %s: %w", rel, err)
		}
		if s.parentFile != nil && (s.parentRel == rel || strings.HasPrefix(s.parentRel, rel+"/")) {
			s.parentFile.Close()
			s.parentFile = nil
		}
		if err := s.root.RemoveAll(rel); err != nil {
			return fmt.Errorf("remove %s: %w", rel, err)
		}
		for _, p := range below {
			delete(s.kinds, p)
			delete(s.dirs, p)
		}
	default:
		if err := s.root.Remove(rel); err != nil {
			return fmt.Errorf("remove %s: %w", rel, err)
		}
		delete(s.kinds, rel)
	}
	return nil
}
