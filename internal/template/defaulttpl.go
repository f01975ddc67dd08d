package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/staticelf"
	"github.com/airlockdev/airlock/internal/textclip"
)

// defaultMtimeUnix (2024-01-01T00:00:00Z) is the modification time of every
// entry of the default template, so that its trees are identical wherever built.
const defaultMtimeUnix = 1704067200

// Files of the default template's /etc.
const (
	defaultPasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	defaultGroup  = "root:x:0:\nnogroup:x:65534:\n"
	defaultHosts  = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
)

// EnsureDefault builds the default template from the static busybox binary
// at busyboxPath and adds it to the store (Reused if it is already there):
// /bin/busybox with a symlink in /bin for each of its applets, /etc/passwd,
// /etc/group and /etc/hosts, the empty mount points /dev /proc /sys /tmp
// (1777) /root /run /home, and /.airlock/{bin,run} where runtimes mount the
// guest agent and its socket directory. The agent is not part of the
// template. The same busybox gives the same digest on every host.
//
// A build is remembered by the SHA-256 of the busybox binary and the
// recipe's version (defaultRecipe): a later call with the same busybox
// finds the template in the store and neither runs busybox nor stages or
// hashes the tree again.
func (s *Store) EnsureDefault(ctx context.Context, busyboxPath string) (Imported, error) {
	data, err := readStaticELF(busyboxPath)
	if err != nil {
		return Imported{}, fmt.Errorf("default template: %w", err)
	}
	record := s.defaultRecord(data)
	if imp, ok := s.remembered(record); ok {
		return imp, nil
	}
	imp, err := s.buildDefault(ctx, busyboxPath, data)
	if err != nil {
		return Imported{}, err
	}
	s.remember(record, imp.Digest)
	return imp, nil
}

// remember writes record (under sources/), naming template d; a failure
// only costs a later import its shortcut.
func (s *Store) remember(record string, d model.TemplateDigest) {
	err := os.MkdirAll(filepath.Dir(record), 0o700)
	if err == nil {
		err = atomicfile.Write(record, []byte(d.String()+"\n"), 0o600)
	}
	if err != nil {
		s.logger.Warn("template store: cannot remember an import; the next one of the same source imports it again",
			"record", filepath.Base(record), "err", err)
	}
}

// defaultRecipe names the default template's recipe: change it whenever
// buildDefault's output changes for the same busybox, so that a build
// remembered by an older binary is not reused.
const defaultRecipe = "default-v1"

// defaultRecord is the file that remembers the default template built from
// this busybox by this recipe.
func (s *Store) defaultRecord(busybox []byte) string {
	sum := sha256.Sum256(busybox)
	return filepath.Join(s.dir, "sources", defaultRecipe+"-"+hex.EncodeToString(sum[:]))
}

// remembered returns the template a record names, if the store still has
// it intact (its manifest parses; the tree itself is checked by Verify).
func (s *Store) remembered(record string) (Imported, bool) {
	b, err := os.ReadFile(record)
	if err != nil {
		return Imported{}, false
	}
	d, err := model.ParseTemplateDigest(strings.TrimSpace(string(b)))
	if err != nil || !s.Has(d) {
		return Imported{}, false
	}
	imp, err := s.load(d)
	if err != nil {
		return Imported{}, false
	}
	imp.Reused = true
	return imp, true
}

// buildDefault stages, hashes and stores the default template.
func (s *Store) buildDefault(ctx context.Context, busyboxPath string, data []byte) (Imported, error) {
	applets, err := busyboxApplets(ctx, busyboxPath)
	if err != nil {
		return Imported{}, fmt.Errorf("default template: %w", err)
	}
	defaultMtime := time.Unix(defaultMtimeUnix, 0)
	return s.importWith(ctx, nil, DefaultConfig(), "default template", func(ctx context.Context, stg *stager) error {
		dir := func(rel string, mode uint32) error {
			return stg.dir(rel, meta{mode: mode, mtime: defaultMtime})
		}
		file := func(rel string, mode uint32, content []byte) error {
			return stg.file(ctx, rel, meta{mode: mode, mtime: defaultMtime}, int64(len(content)), bytes.NewReader(content))
		}
		link := func(rel, target string) error {
			return stg.symlink(rel, target, meta{mtime: defaultMtime})
		}
		dirs := []struct {
			rel  string
			mode uint32
		}{
			{".", 0o755}, {"bin", 0o755}, {"dev", 0o755}, {"etc", 0o755}, {"home", 0o755},
			{"proc", 0o555}, {"root", 0o700}, {"run", 0o755}, {"sys", 0o555}, {"tmp", 0o1777},
			{"usr", 0o755}, {"usr/bin", 0o755},
			{".airlock", 0o755}, {".airlock/bin", 0o755}, {".airlock/run", 0o755},
		}
		for _, d := range dirs {
			if err := dir(d.rel, d.mode); err != nil {
				return err
			}
		}
		if err := file("bin/busybox", 0o755, data); err != nil {
			return err
		}
		for _, a := range applets {
			if err := link("bin/"+a, "busybox"); err != nil {
				return err
			}
		}
		// Scripts commonly start with #!/usr/bin/env.
		if err := link("usr/bin/env", "../../bin/busybox"); err != nil {
			return err
		}
		for _, f := range []struct{ rel, content string }{
			{"etc/passwd", defaultPasswd}, {"etc/group", defaultGroup}, {"etc/hosts", defaultHosts},
		} {
			if err := file(f.rel, 0o644, []byte(f.content)); err != nil {
				return err
			}
		}
		return nil
	})
}

// readStaticELF reads the file at path and checks that it is a statically
// linked ELF executable (no PT_INTERP program header).
func readStaticELF(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (install the busybox-static package)", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("busybox %s is not a regular file", path)
	}
	if fi.Size() > 64<<20 {
		return nil, fmt.Errorf("busybox %s is implausibly large (%d bytes)", path, fi.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w", err)
	}
	switch err := staticelf.Check(data); {
	case errors.Is(err, staticelf.ErrDynamic):
		return nil, fmt.Errorf("busybox %s is %v; a template needs a statically linked busybox (Debian package busybox-static)", path, err)
	case err != nil:
		return nil, fmt.Errorf("busybox %s: %w", path, err)
	}
	return data, nil
}

// busyboxApplets runs `busybox --list` and returns the applet names, sorted,
// without "busybox" itself.
func busyboxApplets(ctx context.Context, path string) ([]string, error) {
	cmd := exec.CommandContext(ctx, path, "--list")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" {
			continue
		}
		if a == "." || a == ".." || len(a) > 255 || strings.ContainsAny(a, "/\x00") {
			return nil, fmt.Errorf("%s --list printed an invalid applet name %q", path, textclip.Bytes(a, maxEcho))
		}
		applets = append(applets, a)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list printed no applets", path)
	}
	slices.Sort(applets)
	return slices.Compact(applets), nil
}
