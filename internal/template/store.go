// Package template is Airlock's on-host template store: content-addressed,
// immutable root filesystem trees that sandboxes use as the read-only lower
// layer of an overlayfs.
//
// Layout under the store directory:
//
//	blobs/sha256-<hex>/manifest.json   canonical manifest; <hex> is its SHA-256
//	blobs/sha256-<hex>/rootfs/         the root filesystem tree
//	staging/import-*/                  imports in progress (lock, blob/)
//
// An import builds blob/ inside a fresh staging directory, computes the tree
// digest and the manifest, and renames blob/ into blobs/ in one step, so a
// blob directory exists only complete. Nothing under blobs/ is modified
// afterwards.
package template

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"

	"github.com/airlockdev/airlock/internal/atomicfile"
)

// Errors. Input that cannot become a template (a malicious or malformed
// archive, a device node, …) wraps model.ErrInvalid; input over a limit wraps
// both model.ErrInvalid and ErrTooLarge.
var (
	// ErrNotFound: the store has no template with that digest.
	ErrNotFound = errors.New("template not found")
	// ErrCorrupt: a stored template does not match its digest.
	ErrCorrupt = errors.New("template corrupt")
	// ErrTooLarge: the input exceeds one of the store's Limits.
	ErrTooLarge = errors.New("template too large")
)

// Limits bound what an import accepts.
type Limits struct {
	MaxBytes   int64 // total size of regular files
	MaxEntries int   // files, directories, symlinks and hardlinks, the root included
	MaxPathLen int   // bytes of an entry's path relative to the root
}

// DefaultLimits are the limits of a newly opened store.
func DefaultLimits() Limits {
	return Limits{MaxBytes: 16 << 30, MaxEntries: 1_000_000, MaxPathLen: 4096}
}

func (l Limits) validate() error {
	if l.MaxBytes < 0 || l.MaxEntries < 1 || l.MaxPathLen < 1 {
		return fmt.Errorf("%w: template limits must be positive: %+v", model.ErrInvalid, l)
	}
	return nil
}

// Progress reports how far an import has come.
type Progress struct {
	Entries int   // entries written so far
	Bytes   int64 // file bytes written so far
}

// Imported describes a template in the store.
type Imported struct {
	Digest    model.TemplateDigest
	Manifest  []byte // canonical manifest; Digest is its SHA-256
	SizeBytes int64  // regular file bytes of the tree
	Entries   int    // entries of the tree, the root included
	Reused    bool   // the template was already in the store
	// What the import cost, for build logs: file bytes read to hash the
	// tree (not those whose hash was remembered), and files linked from
	// the parent instead of copied (ImportLayered).
	HashedBytes int64
	LinkedFiles int
}

// Store is a template store in one directory. Its methods are safe for
// concurrent use, also by several processes sharing the directory.
type Store struct {
	dir    string
	logger *slog.Logger

	mu     sync.Mutex
	limits Limits

	defMu    sync.Mutex
	defaults map[model.TemplateDigest]Defaults // see Defaults

	hashes hashMemo // content hashes of published files (hashmemo.go)
}

// Open opens (creating if needed) the template store in dir and removes
// staging leftovers of imports that crashed.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("template store %s: %w", dir, err)
	}
	s := &Store{dir: abs, logger: logger, limits: DefaultLimits()}
	// 0711: sandboxes' runtimes traverse to the trees; nobody else needs to list.
	for _, d := range []string{abs, s.blobsDir(), s.stagingDir()} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	if err := s.cleanStaging(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// SetLimits replaces the limits that later imports run under.
func (s *Store) SetLimits(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
	return nil
}

// Limits returns the current import limits.
func (s *Store) Limits() Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits
}

func (s *Store) blobsDir() string   { return filepath.Join(s.dir, "blobs") }
func (s *Store) stagingDir() string { return filepath.Join(s.dir, "staging") }

// blobDir returns the directory of digest d, or "" if d is not a valid digest.
func (s *Store) blobDir(d model.TemplateDigest) string {
	if _, err := model.ParseTemplateDigest(string(d)); err != nil {
		return ""
	}
	return filepath.Join(s.blobsDir(), "sha256-"+d.Hex())
}

// RootfsDir returns the host path of template d's root filesystem tree (to
// be used read-only), or "" if d is not a valid digest. It does not check
// that the template exists; see Has.
func (s *Store) RootfsDir(d model.TemplateDigest) string {
	b := s.blobDir(d)
	if b == "" {
		return ""
	}
	return filepath.Join(b, "rootfs")
}

// Has reports whether template d is in the store.
func (s *Store) Has(d model.TemplateDigest) bool {
	b := s.blobDir(d)
	if b == "" {
		return false
	}
	_, err := os.Lstat(filepath.Join(b, "manifest.json"))
	return err == nil
}

// Digests lists the templates in the store cheaply, by their directories
// (Has each), sorted; List also reads and checks every manifest.
func (s *Store) Digests() ([]model.TemplateDigest, error) {
	ents, err := os.ReadDir(s.blobsDir())
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []model.TemplateDigest
	for _, ent := range ents {
		hexPart, ok := strings.CutPrefix(ent.Name(), "sha256-")
		d, perr := model.ParseTemplateDigest("sha256:" + hexPart)
		if ok && perr == nil && ent.IsDir() && s.Has(d) {
			out = append(out, d)
		}
	}
	return out, nil // ReadDir sorts by name, so by digest
}

// Manifest returns template d's canonical manifest after checking that it
// hashes to d.
func (s *Store) Manifest(d model.TemplateDigest) ([]byte, error) {
	b := s.blobDir(d)
	if b == "" {
		return nil, fmt.Errorf("%w: template digest %q", model.ErrInvalid, textclip.Bytes(string(d), maxEcho))
	}
	data, err := os.ReadFile(filepath.Join(b, "manifest.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, d)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest of %s: %w", d, err)
	}
	if got := manifestDigest(data); got != d {
		return nil, fmt.Errorf("%w: %s: manifest hashes to %s", ErrCorrupt, d, got)
	}
	return data, nil
}

// List returns every template in the store, sorted by digest. A blob whose
// manifest does not hash to its directory name is an error (ErrCorrupt)
// naming the directory, so that tampering is never silently ignored.
func (s *Store) List() ([]Imported, error) {
	ents, err := os.ReadDir(s.blobsDir())
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []Imported
	for _, ent := range ents {
		hexPart, ok := strings.CutPrefix(ent.Name(), "sha256-")
		d, perr := model.ParseTemplateDigest("sha256:" + hexPart)
		if !ok || perr != nil || !ent.IsDir() {
			s.logger.Warn("template store: ignoring unexpected entry", "path", filepath.Join(s.blobsDir(), ent.Name()))
			continue
		}
		imp, err := s.load(d)
		if err != nil {
			return nil, fmt.Errorf("template %s (%s): %w", d, filepath.Join(s.blobsDir(), ent.Name()), err)
		}
		out = append(out, imp)
	}
	slices.SortFunc(out, func(a, b Imported) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	return out, nil
}

// load reads and checks the manifest of d.
func (s *Store) load(d model.TemplateDigest) (Imported, error) {
	data, err := s.Manifest(d)
	if err != nil {
		return Imported{}, err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return Imported{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return Imported{Digest: d, Manifest: data, SizeBytes: m.Rootfs.SizeBytes, Entries: m.Rootfs.Entries}, nil
}

// Verify recomputes template d's tree digest and checks it, and the
// manifest, against d. A mismatch wraps ErrCorrupt.
func (s *Store) Verify(ctx context.Context, d model.TemplateDigest) error {
	data, err := s.Manifest(d)
	if err != nil {
		return err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, d, err)
	}
	sum, err := digestTree(ctx, s.RootfsDir(d), nil)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, d, err)
	}
	if got := sum.digestString(); got != m.Rootfs.Digest || sum.size != m.Rootfs.SizeBytes || sum.entries != m.Rootfs.Entries {
		return fmt.Errorf("%w: %s: root filesystem is %s (%d entries, %d bytes), manifest says %s (%d entries, %d bytes)",
			ErrCorrupt, d, got, sum.entries, sum.size, m.Rootfs.Digest, m.Rootfs.Entries, m.Rootfs.SizeBytes)
	}
	return nil
}

func manifestDigest(b []byte) model.TemplateDigest { return model.DigestFromSHA256(sha256.Sum256(b)) }

// staging is one import's private directory: staging/import-*/ holding a
// lock file, flocked while the import runs, and blob/{rootfs/,manifest.json}.
type staging struct {
	dir  string
	lock *os.File
}

func (s *Store) newStaging() (*staging, error) {
	dir, err := os.MkdirTemp(s.stagingDir(), "import-")
	if err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	st := &staging{dir: dir}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		st.lock = lock
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = os.Mkdir(st.blob(), 0o755)
	}
	if err == nil {
		err = os.Mkdir(st.rootfs(), 0o700)
	}
	if err != nil {
		st.remove(s.logger)
		return nil, fmt.Errorf("prepare staging directory %s: %w", dir, err)
	}
	return st, nil
}

func (st *staging) blob() string   { return filepath.Join(st.dir, "blob") }
func (st *staging) rootfs() string { return filepath.Join(st.dir, "blob", "rootfs") }

// remove deletes the staging directory, then releases its lock.
func (st *staging) remove(logger *slog.Logger) {
	if err := os.RemoveAll(st.dir); err != nil {
		logger.Error("template store: cannot remove staging directory", "path", st.dir, "err", err)
	}
	if st.lock != nil {
		st.lock.Close()
	}
}

// cleanStaging removes staging directories whose import no longer runs (its
// lock is free: the process that held it died).
func (s *Store) cleanStaging() error {
	ents, err := os.ReadDir(s.stagingDir())
	if err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	for _, ent := range ents {
		p := filepath.Join(s.stagingDir(), ent.Name())
		if ent.IsDir() && stagingInUse(p) {
			continue
		}
		s.logger.Info("template store: removing stale staging directory", "path", p)
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("template store: remove stale %s: %w", p, err)
		}
	}
	return nil
}

func stagingInUse(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == unix.EWOULDBLOCK
}

// importWith runs one import: fill writes the tree into a fresh staging
// root; the tree is then digested, the manifest written, and the blob
// published under its digest unless it is already there.
func (s *Store) importWith(ctx context.Context, progress func(Progress), cfg Config, what string,
	fill func(context.Context, *stager) error) (Imported, error) {
	return s.importChecked(ctx, progress, cfg, what, "", fill)
}

// importChecked is importWith that, if want is not "", publishes the
// template only if its digest is want, and otherwise fails with ErrCorrupt.
func (s *Store) importChecked(ctx context.Context, progress func(Progress), cfg Config, what string,
	want model.TemplateDigest, fill func(context.Context, *stager) error) (Imported, error) {
	if err := ctx.Err(); err != nil {
		return Imported{}, err
	}
	st, err := s.newStaging()
	if err != nil {
		return Imported{}, err
	}
	defer st.remove(s.logger)

	stg, err := newStager(st.rootfs(), s.Limits(), newProgressReporter(progress))
	if err != nil {
		return Imported{}, err
	}
	err = fill(ctx, stg)
	if err == nil {
		err = stg.finish(ctx)
	}
	stg.close()
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}

	return s.publishStaged(ctx, st, cfg, what, want)
}

// publishStaged digests the tree staged in st and publishes it as the
// template with runtime configuration cfg, unless the store has it already;
// with want set, only if that is the template it makes (else ErrCorrupt).
func (s *Store) publishStaged(ctx context.Context, st *staging, cfg Config, what string, want model.TemplateDigest) (Imported, error) {
	imp, hashed, err := templateOfTree(ctx, st.rootfs(), cfg, &s.hashes)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}
	if err := ctx.Err(); err != nil {
		return Imported{}, err
	}
	if want != "" && imp.Digest != want {
		return Imported{}, fmt.Errorf("%w: import %s: the tree makes template %s", ErrCorrupt, what, imp.Digest)
	}
	if s.Has(imp.Digest) {
		imp.Reused = true
		return imp, nil
	}
	published, err := s.publish(st, imp)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}
	imp.Reused = !published
	if published {
		s.hashes.add(hashed)
	}
	s.logger.Info("template imported", "source", what, "digest", imp.Digest, "entries", imp.Entries,
		"bytes", imp.SizeBytes, "reused", imp.Reused)
	return imp, nil
}

// publish writes the manifest, makes the staged blob durable and renames it
// into place. It reports false if another import published it first.
func (s *Store) publish(st *staging, imp Imported) (bool, error) {
	if err := writeFileSync(filepath.Join(st.blob(), "manifest.json"), imp.Manifest, 0o644); err != nil {
		return false, err
	}
	// One syncfs makes the whole staged tree durable before it becomes
	// visible; far cheaper than an fsync per file.
	if err := syncfs(st.blob()); err != nil {
		return false, err
	}
	dst := s.blobDir(imp.Digest)
	err := unix.Renameat2(unix.AT_FDCWD, st.blob(), unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No RENAME_NOREPLACE here; rename(2) still refuses a non-empty target.
		err = os.Rename(st.blob(), dst)
	}
	switch {
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("publish %s: %w", imp.Digest, err)
	}
	if err := atomicfile.SyncDir(s.blobsDir()); err != nil {
		return true, err
	}
	return true, nil
}

func writeFileSync(name string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// templateOfTree digests the tree at rootfs and makes its canonical manifest
// with runtime configuration cfg: the template it is, not yet stored.
func templateOfTree(ctx context.Context, rootfs string, cfg Config, memo *hashMemo) (Imported, map[memoKey]memoEntry, error) {
	sum, err := digestTree(ctx, rootfs, memo)
	if err != nil {
		return Imported{}, nil, fmt.Errorf("digest the tree: %w", err)
	}
	m := Manifest{
		SchemaVersion: ManifestSchemaVersion,
		Rootfs:        RootfsInfo{Digest: sum.digestString(), SizeBytes: sum.size, Entries: sum.entries},
		Config:        cfg,
	}
	data, err := m.Encode()
	if err != nil {
		return Imported{}, nil, err
	}
	return Imported{Digest: manifestDigest(data), Manifest: data, SizeBytes: sum.size, Entries: sum.entries, HashedBytes: sum.read}, sum.hashed, nil
}
