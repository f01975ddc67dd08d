package model

import (
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// SnapshotID identifies a saved snapshot of a running sandbox: "snp_" + 26
// base32 characters.
type SnapshotID string

// NewSnapshotID returns a fresh random snapshot ID.
func NewSnapshotID() SnapshotID { return SnapshotID(newID("snp")) }

// ParseSnapshotID parses s as a snapshot ID.
func ParseSnapshotID(s string) (SnapshotID, error) {
	v, err := parseID("snapshot ID", "snp", s)
	return SnapshotID(v), err
}

func (id SnapshotID) String() string { return string(id) }

// MaxSnapshotNameLen bounds a snapshot's name.
const MaxSnapshotNameLen = 63

// SnapshotName is the optional name of a saved snapshot: 1 to 63 letters,
// digits, '.', '_' or '-', starting with a letter or digit, never "snp_…"
// (so that a reference is an ID or a name, not both). Names are not
// unique: a listing filtered by name shows every snapshot that has it.
type SnapshotName string

// ParseSnapshotName parses s as a snapshot name.
func ParseSnapshotName(s string) (SnapshotName, error) {
	if s == "" || len(s) > MaxSnapshotNameLen {
		return "", fmt.Errorf("%w: snapshot name %q must be 1 to %d characters", ErrInvalid, textclip.Bytes(s, maxEcho), MaxSnapshotNameLen)
	}
	if len(s) >= 4 && s[:4] == "snp_" {
		return "", fmt.Errorf("%w: snapshot name %q must not start with \"snp_\" (snapshot IDs do)", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return "", fmt.Errorf("%w: snapshot name %q must be letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return SnapshotName(s), nil
}

func (n SnapshotName) String() string { return string(n) }

// SnapshotState is where a saved snapshot is in its life.
type SnapshotState string

// Snapshot states.
const (
	// SnapshotCreating: its snapshot operation has not finished; it has
	// no files yet (or a temporary directory the node removes if the
	// operation fails).
	SnapshotCreating SnapshotState = "creating"
	// SnapshotReady: complete; new sandboxes may start from it.
	SnapshotReady SnapshotState = "ready"
	// SnapshotFailed: its operation failed; it has no files. Deleting it
	// removes the record.
	SnapshotFailed SnapshotState = "failed"
	// SnapshotDeleting: deleted (or a fork's, used): its node removes its
	// files once no sandbox is being created from it, then the record.
	SnapshotDeleting SnapshotState = "deleting"
)

// ParseSnapshotState parses a snapshot state.
func ParseSnapshotState(s string) (SnapshotState, error) {
	switch st := SnapshotState(s); st {
	case SnapshotCreating, SnapshotReady, SnapshotFailed, SnapshotDeleting:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown snapshot state %q", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// SnapshotRecord is a saved snapshot of a running sandbox, a noun of its
// own (POST /v1/sandboxes/{id}/snapshots): it outlives its source and new
// sandboxes start from it. What a sandbox made from it needs of its source
// is kept with it: template, resources, environment variables, egress
// policy (stored beside) and the node and environment it was taken in.
type SnapshotRecord struct {
	ID        SnapshotID
	ProjectID ProjectID
	// Name is its optional name ("" for none).
	Name SnapshotName
	// Source is the sandbox it was taken of (which may be gone since).
	Source      SandboxID
	State       SnapshotState
	Error       string // why it failed; empty otherwise
	NodeID      NodeID
	Environment EnvironmentRef
	Runtime     string
	Template    TemplateDigest
	Resources   Resources
	Env         Env
	// Operation is the snapshot operation that writes it.
	Operation OperationID
	// Fork: made by POST /v1/sandboxes/{id}/fork for its sandboxes alone;
	// not listed, and deleted once they are created.
	Fork bool
	// Kind, Format, Location and SizeBytes are set once it is ready:
	// what the runtime wrote and where (a path on NodeID).
	Kind      SnapshotKind
	Format    string
	Location  string
	SizeBytes int64
	// Storage says whether its files are also in the shared blob store
	// ("" local: only on NodeID; saving; stored: any node can pull them),
	// and BlobManifest is then the digest of its blob manifest.
	Storage      SnapshotStorage
	BlobManifest BlobDigest
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// SnapshotStorage says where a ready snapshot's files are kept.
type SnapshotStorage string

// Snapshot storages.
const (
	// SnapshotLocal: only on the node that took it (no blob store, a
	// fork's, or a runtime whose snapshots cannot move).
	SnapshotLocal SnapshotStorage = ""
	// SnapshotSaving: ready on its node, being pushed to the blob store.
	SnapshotSaving SnapshotStorage = "saving"
	// SnapshotStored: in the blob store as well; any node can pull it.
	SnapshotStored SnapshotStorage = "stored"
)

// ParseSnapshotStorage parses a snapshot storage ("" is SnapshotLocal).
func ParseSnapshotStorage(s string) (SnapshotStorage, error) {
	switch st := SnapshotStorage(s); st {
	case SnapshotLocal, SnapshotSaving, SnapshotStored:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown snapshot storage %q", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// String returns the storage's name, "local" for SnapshotLocal.
func (s SnapshotStorage) String() string {
	if s == SnapshotLocal {
		return "local"
	}
	return string(s)
}

// BlobDigest is the content address of a blob in the shared blob store,
// "sha256:" + 64 lower-case hex characters, parsed once (ParseBlobDigest).
type BlobDigest string

// ParseBlobDigest parses s as a blob digest.
func ParseBlobDigest(s string) (BlobDigest, error) {
	if _, err := ParseTemplateDigest(s); err != nil {
		return "", fmt.Errorf("%w: blob digest %q must be sha256:<64 lower-case hex characters>", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	return BlobDigest(s), nil
}

func (d BlobDigest) String() string { return string(d) }

// Bounds of a fork's count (POST /v1/sandboxes/{id}/fork).
const (
	MinForkCount = 1
	MaxForkCount = 16
)

// CheckForkCount checks a fork's count against its bounds.
func CheckForkCount(n int) error {
	if n < MinForkCount || n > MaxForkCount {
		return fmt.Errorf("%w: count %d must be between %d and %d", ErrInvalid, n, MinForkCount, MaxForkCount)
	}
	return nil
}
