package template

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Defaults are what sandboxes of a template start with: the manifest's
// Config, with its User resolved against the template's own /etc/passwd
// and /etc/group.
type Defaults struct {
	Config Config
	// User is Config.User as numeric IDs; nil when Config.User is empty
	// (processes run as root) or could not be resolved (UserErr says why).
	User *model.UserIDs
	// UserErr says why Config.User names no user of the template. It does
	// not stop sandboxes from being created: a command that runs as the
	// template's user fails with it, one that names its own user does not.
	UserErr error
	// UserName and Home are Config.User's /etc/passwd entry's name and
	// home directory ("" when the template's passwd has no entry for it).
	UserName, Home string
}

// Bounds on what resolving a template's user reads.
const (
	maxIDFileSize     = 4 << 20 // bytes read of /etc/passwd or /etc/group
	maxDefaultsCached = 1024
	maxUnixID         = 1<<31 - 2 // as model.ParseUserIDs
)

// Defaults returns the runtime defaults of template d. Templates are
// immutable, so the result is computed once per digest and cached.
func (s *Store) Defaults(d model.TemplateDigest) (Defaults, error) {
	s.defMu.Lock()
	def, ok := s.defaults[d]
	s.defMu.Unlock()
	if ok {
		return def, nil
	}
	data, err := s.Manifest(d)
	if err != nil {
		return Defaults{}, err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return Defaults{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, d, err)
	}
	def = Defaults{Config: m.Config}
	if m.Config.User != "" {
		u, err := resolveUserEntry(s.RootfsDir(d), m.Config.User)
		if err != nil {
			def.UserErr = fmt.Errorf("the template's user %q: %w", textclip.Bytes(m.Config.User, maxEcho), err)
		} else {
			def.User, def.UserName, def.Home = &u.ids, u.name, u.home
		}
	}
	s.defMu.Lock()
	if s.defaults == nil || len(s.defaults) >= maxDefaultsCached {
		s.defaults = map[model.TemplateDigest]Defaults{}
	}
	s.defaults[d] = def
	s.defMu.Unlock()
	return def, nil
}

// resolveUser turns an image's user ("name", "uid", "uid:gid", "name:group",
// "uid:group" or "name:gid") into numeric IDs the way OCI runtimes do: a
// name must be in the tree's /etc/passwd (a group name in /etc/group); a
// numeric user need not be, and without a group takes its passwd entry's
// group, or 0 when it has none. The files are read inside rootfs only
// (symbolic links cannot leave it).
func resolveUser(rootfs, spec string) (model.UserIDs, error) {
	u, err := resolveUserEntry(rootfs, spec)
	return u.ids, err
}

// userEntry is a resolved user: its IDs and, when /etc/passwd has it, its
// name and home directory.
type userEntry struct {
	ids        model.UserIDs
	name, home string
}

// resolveUserEntry is resolveUser with the passwd entry's name and home.
func resolveUserEntry(rootfs, spec string) (userEntry, error) {
	ids, ent, err := resolveIDs(rootfs, spec)
	out := userEntry{ids: ids}
	if len(ent) >= 6 {
		out.name, out.home = ent[0], ent[5]
	}
	return out, err
}

// resolveIDs resolves spec and returns the user's passwd entry's fields
// (nil for a numeric user the file lacks).
func resolveIDs(rootfs, spec string) (model.UserIDs, []string, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || hasGroup && groupPart == "" {
		return model.UserIDs{}, nil, errors.New("want user[:group]")
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return model.UserIDs{}, nil, fmt.Errorf("open the template's root: %w", err)
	}
	defer root.Close()

	var ids model.UserIDs
	uid, numeric := parseID(userPart)
	// name:pw:uid:gid:…
	ent, err := findEntry(root, "etc/passwd", func(f []string) bool {
		if len(f) < 4 {
			return false
		}
		if numeric {
			id, ok := parseID(f[2])
			return ok && id == uid
		}
		return f[0] == userPart
	})
	switch {
	case err != nil && !(numeric && errors.Is(err, fs.ErrNotExist)):
		return model.UserIDs{}, nil, err
	case ent != nil:
		u, ok1 := parseID(ent[2])
		g, ok2 := parseID(ent[3])
		if !ok1 || !ok2 {
			return model.UserIDs{}, nil, errors.New("the template's /etc/passwd has a malformed entry for it")
		}
		ids = model.UserIDs{UID: u, GID: g}
	case numeric:
		ids = model.UserIDs{UID: uid}
	default:
		return model.UserIDs{}, nil, errors.New("no such user in the template's /etc/passwd")
	}
	pw := ent
	if !hasGroup {
		return ids, pw, nil
	}
	if gid, ok := parseID(groupPart); ok {
		ids.GID = gid
		return ids, pw, nil
	}
	// name:pw:gid:members
	ent, err = findEntry(root, "etc/group", func(f []string) bool { return len(f) >= 3 && f[0] == groupPart })
	if err != nil {
		return model.UserIDs{}, nil, err
	}
	if ent == nil {
		return model.UserIDs{}, nil, fmt.Errorf("no group %q in the template's /etc/group", textclip.Bytes(groupPart, maxEcho))
	}
	gid, ok := parseID(ent[2])
	if !ok {
		return model.UserIDs{}, nil, fmt.Errorf("the template's /etc/group has a malformed entry for group %q", textclip.Bytes(groupPart, maxEcho))
	}
	ids.GID = gid
	return ids, pw, nil
}

// parseID parses a decimal user or group ID in the range model accepts.
func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxUnixID {
		return 0, false
	}
	return uint32(n), true
}

// findEntry returns the colon-separated fields of the first line of the
// file name (inside root) that match accepts, or nil. A missing file is an
// error matching fs.ErrNotExist.
func findEntry(root *os.Root, name string, match func([]string) bool) ([]string, error) {
	// Stat before opening: opening a FIFO would block (the tree is
	// immutable, so what Stat sees is what Open gets).
	st, err := root.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the template has no /%s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("read the template's /%s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("the template's /%s is not a regular file", name)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read the template's /%s: %w", name, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxIDFileSize))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if fields := strings.Split(line, ":"); match(fields) {
			return fields, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the template's /%s: %w", name, err)
	}
	return nil, nil
}

// ResolveUser resolves spec ("name", "uid", "uid:gid", "name:group", …)
// against template d's own /etc/passwd and /etc/group, as a template's
// configured user is (read inside the tree only).
func (s *Store) ResolveUser(d model.TemplateDigest, spec string) (model.UserIDs, error) {
	if !s.Has(d) {
		return model.UserIDs{}, fmt.Errorf("template %s: %w", d, ErrNotFound)
	}
	return resolveUser(s.RootfsDir(d), spec)
}
