package model

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// VolumeID identifies a volume: "vol_" + 26 base32 characters.
type VolumeID string

// NewVolumeID returns a fresh random volume ID.
func NewVolumeID() VolumeID { return VolumeID(newID("vol")) }

// ParseVolumeID parses s as a volume ID.
func ParseVolumeID(s string) (VolumeID, error) {
	v, err := parseID("volume ID", "vol", s)
	return VolumeID(v), err
}

func (id VolumeID) String() string { return string(id) }

// VolumeName is a volume's name, unique within its project: 1 to 63
// characters of [A-Za-z0-9._-], starting with a letter or digit, and never
// starting with "vol_" (so that a reference is a name or an ID, never
// both).
type VolumeName string

// MaxVolumeNameLen bounds a volume name.
const MaxVolumeNameLen = 63

// ParseVolumeName parses s as a volume name.
func ParseVolumeName(s string) (VolumeName, error) {
	if s == "" || len(s) > MaxVolumeNameLen {
		return "", fmt.Errorf("%w: volume name %q must be 1 to %d characters", ErrInvalid, textclip.Bytes(s, maxEcho), MaxVolumeNameLen)
	}
	if strings.HasPrefix(s, "vol_") {
		return "", fmt.Errorf("%w: volume name %q must not start with \"vol_\" (volume IDs do)", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return "", fmt.Errorf("%w: volume name %q must be letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return VolumeName(s), nil
}

func (n VolumeName) String() string { return string(n) }

// VolumeRef names a volume of a project by its ID or by its name.
type VolumeRef struct {
	ID   VolumeID   // set for a reference by ID
	Name VolumeName // set for a reference by name
}

// ParseVolumeRef parses s as a volume ID ("vol_…") or else a volume name.
func ParseVolumeRef(s string) (VolumeRef, error) {
	if strings.HasPrefix(s, "vol_") {
		id, err := ParseVolumeID(s)
		return VolumeRef{ID: id}, err
	}
	n, err := ParseVolumeName(s)
	return VolumeRef{Name: n}, err
}

func (r VolumeRef) String() string {
	if r.ID != "" {
		return string(r.ID)
	}
	return string(r.Name)
}

// Volume size bounds (MiB): a volume is an ext4 image of its size.
const (
	MinVolumeMiB = 16
	MaxVolumeMiB = MaxDiskMiB
)

// ParseVolumeSize checks a volume's size in MiB.
func ParseVolumeSize(mib int64) (int, error) {
	if mib < MinVolumeMiB || mib > MaxVolumeMiB {
		return 0, fmt.Errorf("%w: size_mib must be between %d and %d", ErrInvalid, MinVolumeMiB, MaxVolumeMiB)
	}
	return int(mib), nil
}

// Volume is persistent storage of a project that outlives sandboxes: an
// ext4 filesystem of SizeMiB on one node, mounted into the sandboxes that
// name it at create.
type Volume struct {
	ID        VolumeID
	ProjectID ProjectID
	Name      VolumeName
	SizeMiB   int
	// NodeID is the node that holds its data; empty until a sandbox (or a
	// write of its content) first uses it, which binds it to that node.
	NodeID    NodeID
	CreatedAt time.Time
}

// VolumeMount is a volume mounted (read-write) into a sandbox at Path. The
// sandbox record keeps the volume's size too, for the node that makes its
// filesystem.
type VolumeMount struct {
	Volume  VolumeID  `json:"volume"`
	Path    GuestPath `json:"path"`
	SizeMiB int       `json:"size_mib"`
}

// MaxVolumeMounts bounds the volumes one sandbox mounts.
const MaxVolumeMounts = 8

// Guest paths a volume may not be mounted at or below (the guest's kernel
// interfaces and Airlock's own files), and paths it may not be mounted
// at (directories the guest's system needs; below them is fine).
var (
	volumeForbiddenTrees = []string{"/proc", "/sys", "/dev", "/.airlock", "/etc/airlock"}
	volumeForbiddenAt    = []string{"/", "/tmp", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/var", "/run", "/root", "/home", "/boot", "/etc/ssl", "/etc/ssl/certs"}
)

// ParseVolumePath parses s as the guest path a volume is mounted at: a
// GuestPath that is not a system directory (/, /tmp, /etc, /usr, …) and
// not at or below /proc, /sys, /dev, /.airlock or /etc/airlock.
func ParseVolumePath(s string) (GuestPath, error) {
	p, err := ParseGuestPath(s)
	if err != nil {
		return "", err
	}
	for _, t := range volumeForbiddenTrees {
		if s == t || strings.HasPrefix(s, t+"/") {
			return "", fmt.Errorf("%w: a volume cannot be mounted at %q: %s is reserved", ErrInvalid, textclip.Bytes(s, maxEcho), t)
		}
	}
	for _, t := range volumeForbiddenAt {
		if s == t {
			return "", fmt.Errorf("%w: a volume cannot be mounted over the system directory %s (mount it below, e.g. /data or %s/data)", ErrInvalid, t, strings.TrimSuffix(t, "/"))
		}
	}
	return p, nil
}

// CheckVolumeMountPaths checks a sandbox's mounts together: at most
// MaxVolumeMounts, each volume once, and no path at or below another's.
func CheckVolumeMountPaths(mounts []VolumeMount) error {
	if len(mounts) > MaxVolumeMounts {
		return fmt.Errorf("%w: at most %d volume mounts", ErrInvalid, MaxVolumeMounts)
	}
	for i, a := range mounts {
		for _, b := range mounts[i+1:] {
			if a.Volume == b.Volume {
				return fmt.Errorf("%w: volume %s is mounted twice", ErrInvalid, a.Volume)
			}
			if a.Path == b.Path || strings.HasPrefix(string(b.Path), string(a.Path)+"/") || strings.HasPrefix(string(a.Path), string(b.Path)+"/") {
				return fmt.Errorf("%w: volume mount paths %s and %s overlap", ErrInvalid, a.Path, b.Path)
			}
		}
	}
	return nil
}

// VolumeFilePath is a path inside a volume's filesystem: absolute from the
// volume's root ("/" is the root itself) and clean, as a GuestPath. It is
// only a name: the volume content API resolves it beneath the volume's
// root (internal/volumefs), where no symlink can lead out.
type VolumeFilePath string

// ParseVolumeFilePath parses s as a path inside a volume. A relative path
// ("a/b") is taken from the root ("/a/b"); otherwise it must be a clean
// GuestPath: no "..", "." or repeated slashes, no NUL, at most 4096 bytes.
func ParseVolumeFilePath(s string) (VolumeFilePath, error) {
	if s != "" && !strings.HasPrefix(s, "/") {
		s = "/" + s
	}
	p, err := ParseGuestPath(s)
	if err != nil {
		return "", err
	}
	return VolumeFilePath(p), nil
}

func (p VolumeFilePath) String() string { return string(p) }

// IsRoot reports whether p is the volume's root.
func (p VolumeFilePath) IsRoot() bool { return p == "/" }

// Rel is p relative to the volume's root ("." for the root).
func (p VolumeFilePath) Rel() string {
	if p.IsRoot() {
		return "."
	}
	return string(p[1:])
}

// Split returns p's parent and its last component (the root: itself and
// "").
func (p VolumeFilePath) Split() (VolumeFilePath, string) {
	if p.IsRoot() {
		return p, ""
	}
	i := strings.LastIndexByte(string(p), '/')
	parent := p[:i]
	if parent == "" {
		parent = "/"
	}
	return parent, string(p[i+1:])
}

// Join is p with the single component name below it.
func (p VolumeFilePath) Join(name string) VolumeFilePath {
	if p.IsRoot() {
		return VolumeFilePath("/" + name)
	}
	return VolumeFilePath(string(p) + "/" + name)
}
