package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"

	"github.com/airlockdev/airlock/internal/model"
)

// A copy step's input is read from the context directory through an
// os.Root, so neither its source path nor a symlink on the way can leave the
// directory. Below a source directory, symlinks are copied as symlinks
// (resolved inside the tree later), never followed.

// srcEntry is one entry of a copy step's source.
type srcEntry struct {
	rel    string // path below the source, "." for the source itself
	full   string // path in the context directory
	kind   byte   // 'd', 'f' or 'l'
	perm   uint32 // permission bits it gets in the tree ('d', 'f')
	size   int64
	target string // symlink target
}

const maxSourceEntries = 1_000_000

// visitSource calls fn for the copy source and, when it is a directory,
// everything below it, depth first, names in byte order.
func visitSource(ctx context.Context, root *os.Root, c Copy, fn func(srcEntry) error) error {
	fi, err := root.Stat(c.Src)
	if err != nil {
		return sourceErr(c.Src, err)
	}
	count := 0
	var visit func(rel, full string, fi fs.FileInfo) error
	visit = func(rel, full string, fi fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if count++; count > maxSourceEntries {
			return fmt.Errorf("%w: copy %s: more than %d entries", model.ErrInvalid, c.Src, maxSourceEntries)
		}
		e := srcEntry{rel: rel, full: full}
		switch m := fi.Mode(); {
		case m.IsDir():
			e.kind, e.perm = 'd', 0o755
		case m.IsRegular():
			e.kind, e.size, e.perm = 'f', fi.Size(), 0o644
			if m.Perm()&0o111 != 0 {
				e.perm = 0o755
			}
			if c.Mode != 0 {
				e.perm = c.Mode
			}
		case m&fs.ModeSymlink != 0 && rel != ".":
			t, err := root.Readlink(full)
			if err != nil {
				return sourceErr(full, err)
			}
			e.kind, e.target = 'l', t
		default:
			return fmt.Errorf("%w: copy %s: %s is not a regular file, directory or symlink", model.ErrInvalid, c.Src, full)
		}
		if err := fn(e); err != nil {
			return err
		}
		if e.kind != 'd' {
			return nil
		}
		d, err := root.Open(full)
		if err != nil {
			return sourceErr(full, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return sourceErr(full, err)
		}
		slices.Sort(names)
		for _, name := range names {
			childFull := path.Join(full, name)
			cfi, err := root.Lstat(childFull)
			if err != nil {
				return sourceErr(childFull, err)
			}
			childRel := name
			if rel != "." {
				childRel = rel + "/" + name
			}
			if err := visit(childRel, childFull, cfi); err != nil {
				return err
			}
		}
		return nil
	}
	return visit(".", c.Src, fi)
}

func sourceErr(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: copy source %s does not exist in the context directory", model.ErrInvalid, p)
	}
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent" {
		return fmt.Errorf("%w: copy source %s leaves the context directory", model.ErrInvalid, p)
	}
	return fmt.Errorf("copy source %s: %w", p, err)
}

// sourceHasher digests a copy source: every entry's kind, path, permission
// bits, size, content SHA-256 and symlink target.
type sourceHasher struct {
	h   hash.Hash
	buf []byte
}

func newSourceHasher() *sourceHasher {
	h := sha256.New()
	io.WriteString(h, "airlock-recipe-copy-v1\x00")
	return &sourceHasher{h: h, buf: make([]byte, 256<<10)}
}

// add records e; content is its content for a regular file.
func (s *sourceHasher) add(e srcEntry, content []byte) {
	rec := []byte{e.kind, 0}
	rec = append(append(rec, e.rel...), 0)
	rec = append(strconv.AppendUint(rec, uint64(e.perm), 8), 0)
	rec = append(strconv.AppendInt(rec, e.size, 10), 0)
	rec = append(hex.AppendEncode(rec, content), 0)
	rec = append(append(rec, e.target...), 0)
	s.h.Write(rec)
}

func (s *sourceHasher) sum() string { return hex.EncodeToString(s.h.Sum(nil)) }

// hashFile returns the SHA-256 of the regular file e, checking its size.
func hashFile(ctx context.Context, root *os.Root, e srcEntry, w io.Writer, buf []byte) ([]byte, error) {
	f, err := root.Open(e.full)
	if err != nil {
		return nil, sourceErr(e.full, err)
	}
	defer f.Close()
	h := sha256.New()
	var dst io.Writer = h
	if w != nil {
		dst = io.MultiWriter(h, w)
	}
	n, err := io.CopyBuffer(dst, ctxReader{ctx, f}, buf)
	if err != nil {
		return nil, fmt.Errorf("copy source %s: %w", e.full, err)
	}
	if n != e.size {
		return nil, fmt.Errorf("copy source %s changed while being read", e.full)
	}
	return h.Sum(nil), nil
}

// digestSource returns the digest of copy c's source in the context
// directory root.
func digestSource(ctx context.Context, root *os.Root, c Copy) (string, error) {
	sh := newSourceHasher()
	err := visitSource(ctx, root, c, func(e srcEntry) error {
		var sum []byte
		if e.kind == 'f' {
			var err error
			if sum, err = hashFile(ctx, root, e, nil, sh.buf); err != nil {
				return err
			}
		}
		sh.add(e, sum)
		return nil
	})
	if err != nil {
		return "", err
	}
	return sh.sum(), nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
