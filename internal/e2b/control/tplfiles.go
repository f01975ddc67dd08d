package control

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Files of E2B template builds: the SDK asks, per COPY step, for an
// upload link for the step's filesHash (GET /templates/{id}/files/{hash});
// the server answers present when it holds that hash for the caller, else
// a URL of its own to PUT the archive to (a tar, gzipped or not, of the
// step's sources relative to the file context). The URL is signed: an
// HMAC (a key the server draws at start) of the caller's scope (a hash of
// its API key: one key's uploads serve only its own builds), the hash and
// an expiry (an hour); the PUT needs nothing else, as the SDK sends
// nothing else. Uploads are bounded (MaxUploadBytes), kept as
// <dir>/<scope>/<hash>, written to a temporary file and renamed, and
// removed a day after their last use. The server cannot check the SDK's
// filesHash against the archive (the SDK hashes file metadata the archive
// lacks): the hash is a name within the caller's own scope.
//
// At a build's start each COPY's archive is extracted into the build's
// context directory (<dir>/ctx/<build>) under os.Root, so no entry lands
// outside it: directories, regular files and symbolic links (kept as
// links, never followed); hard links, devices and anything else are
// refused, and so are more than maxArchiveEntries entries or
// MaxUploadBytes of files.

// MaxUploadBytes bounds one uploaded archive and what it extracts to.
const MaxUploadBytes = 1 << 30

// maxArchiveEntries bounds the entries of one archive.
const maxArchiveEntries = 100_000

// uploadTTL is how long an upload link is good.
const uploadTTL = time.Hour

// filesKeep is how long unused uploads and build contexts are kept.
const filesKeep = 24 * time.Hour

var filesHashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// tplFileStore keeps uploads and build contexts under dir.
type tplFileStore struct {
	dir string
	key []byte // signs upload URLs
}

func newTplFileStore(dir string) (*tplFileStore, error) {
	if err := os.MkdirAll(filepath.Join(dir, "ctx"), 0o700); err != nil {
		return nil, fmt.Errorf("e2b template files: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &tplFileStore{dir: dir, key: key}, nil
}

// scopeOf is the directory name of an API key's uploads.
func scopeOf(apiKey string) string {
	sum := sha256.Sum256([]byte("airlock-e2b-template-files\x00" + apiKey))
	return hex.EncodeToString(sum[:16])
}

func (f *tplFileStore) path(scope, hash string) string {
	return filepath.Join(f.dir, scope, hash)
}

// has reports whether scope holds hash, and marks it used.
func (f *tplFileStore) has(scope, hash string) bool {
	p := f.path(scope, hash)
	if _, err := os.Stat(p); err != nil {
		return false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return true
}

func (f *tplFileStore) sign(scope, hash string, exp int64) string {
	m := hmac.New(sha256.New, f.key)
	fmt.Fprintf(m, "%s/%s/%d", scope, hash, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// uploadURL is the signed URL for scope's upload of hash, on base (the
// scheme and host the caller reached the server at).
func (f *tplFileStore) uploadURL(base, templateID, scope, hash string) string {
	exp := time.Now().Add(uploadTTL).Unix()
	return fmt.Sprintf("%s/templates/%s/files/%s?scope=%s&expires=%d&signature=%s",
		base, pathEscape(templateID), hash, scope, exp, f.sign(scope, hash, exp))
}

func pathEscape(s string) string {
	return strings.NewReplacer("/", "%2F", "?", "%3F", "#", "%23", " ", "%20").Replace(s)
}

// verify checks an upload URL's query for hash.
func (f *tplFileStore) verify(q map[string][]string, hash string) (scope string, ok bool) {
	get := func(k string) string {
		if v := q[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	scope, sig := get("scope"), get("signature")
	exp, err := strconv.ParseInt(get("expires"), 10, 64)
	if err != nil || scope == "" || len(scope) != 32 || time.Now().Unix() > exp {
		return "", false
	}
	if !hmac.Equal([]byte(sig), []byte(f.sign(scope, hash, exp))) {
		return "", false
	}
	return scope, true
}

// put stores body as scope's hash, at most MaxUploadBytes.
func (f *tplFileStore) put(scope, hash string, body io.Reader) error {
	dir := filepath.Join(f.dir, scope)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.LimitReader(body, MaxUploadBytes+1))
	if err == nil && n > MaxUploadBytes {
		err = &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the archive is larger than %d bytes", MaxUploadBytes)}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path(scope, hash))
}

// tidy removes uploads and build contexts unused for filesKeep.
func (f *tplFileStore) tidy() {
	cutoff := time.Now().Add(-filesKeep)
	ents, err := os.ReadDir(f.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		sub := filepath.Join(f.dir, e.Name())
		inner, err := os.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, i := range inner {
			if fi, err := i.Info(); err == nil && fi.ModTime().Before(cutoff) {
				_ = os.RemoveAll(filepath.Join(sub, i.Name()))
			}
		}
	}
}

// newContext makes the context directory of build id.
func (f *tplFileStore) newContext(id string) (string, error) {
	d := filepath.Join(f.dir, "ctx", id)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.Mkdir(d, 0o755)
}

// removeContext removes a context directory newContext made.
func (f *tplFileStore) removeContext(dir string) error {
	if filepath.Dir(dir) != filepath.Join(f.dir, "ctx") {
		return fmt.Errorf("%s is not a build context directory", dir)
	}
	return os.RemoveAll(dir)
}

// buildFiles lays out one build's COPY sources (tplFiles).
type buildFiles struct {
	store  *tplFileStore
	scope  string
	ctxDir string
}

func (b buildFiles) lay(i int, hash, src, dest string) ([][3]string, error) {
	if !filesHashRe.MatchString(hash) {
		return nil, badRequest("filesHash %q is not a SHA-256 in hex", hash)
	}
	if !b.store.has(b.scope, hash) {
		return nil, badRequest("the files of hash %s were not uploaded (ask for their upload link first)", hash)
	}
	x := filepath.Join(b.ctxDir, fmt.Sprintf("x%d", i))
	if err := extractArchive(b.store.path(b.scope, hash), x); err != nil {
		return nil, err
	}
	return layCopy(b.ctxDir, x, i, src, dest)
}

// extractArchive extracts the tar (gzipped or not) at file into dir
// (made), under os.Root: nothing lands outside dir.
func extractArchive(file, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	var r io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return badRequest("the uploaded archive: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return badRequest("the uploaded archive: %v", err)
		}
		if n >= maxArchiveEntries {
			return badRequest("the uploaded archive has more than %d entries", maxArchiveEntries)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return badRequest("the uploaded archive's entry %q leaves its directory", h.Name)
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return badRequest("the uploaded archive's entry %q: %v", h.Name, err)
			}
		}
		mode := fs.FileMode(h.Mode) & 0o777
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return badRequest("the uploaded archive's entry %q: %v", h.Name, err)
			}
			_ = root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			if total += h.Size; total > MaxUploadBytes {
				return badRequest("the uploaded archive holds more than %d bytes", MaxUploadBytes)
			}
			if err := writeEntry(root, name, mode, tr); err != nil {
				return badRequest("the uploaded archive's entry %q: %v", h.Name, err)
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return badRequest("the uploaded archive's entry %q: %v", h.Name, err)
			}
		default:
			return badRequest("the uploaded archive's entry %q is not a file, directory or symbolic link", h.Name)
		}
	}
}

func writeEntry(root *os.Root, name string, mode fs.FileMode, r io.Reader) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(name, mode)
	}
	return err
}
