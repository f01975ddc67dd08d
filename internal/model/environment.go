package model

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// EnvironmentRef names one execution environment by content: "env:sha256:"
// and the lower-case hex SHA-256 of its definition's canonical encoding
// (internal/environment). Two nodes that compute the same reference run
// sandboxes the same way; a snapshot is restored only where its reference
// matches.
type EnvironmentRef string

const envRefPrefix = "env:sha256:"

// ParseEnvironmentRef parses "env:sha256:<64 lower-case hex>".
func ParseEnvironmentRef(s string) (EnvironmentRef, error) {
	h, ok := strings.CutPrefix(s, envRefPrefix)
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		return "", fmt.Errorf("%w: environment reference %q must be %s and 64 lower-case hex digits", ErrInvalid, textclip.Bytes(s, maxEcho), envRefPrefix)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%w: environment reference %q: %v", ErrInvalid, textclip.Bytes(s, maxEcho), err)
	}
	return EnvironmentRef(s), nil
}

// EnvironmentRefOf returns the reference of a definition whose canonical
// encoding hashes to sum.
func EnvironmentRefOf(sum [32]byte) EnvironmentRef {
	return EnvironmentRef(envRefPrefix + hex.EncodeToString(sum[:]))
}

func (r EnvironmentRef) String() string { return string(r) }

// Short is the reference cut to its first 12 hex digits, for messages.
func (r EnvironmentRef) Short() string {
	if len(r) < len(envRefPrefix)+12 {
		return string(r)
	}
	return string(r)[:len(envRefPrefix)+12]
}

// SnapshotKind says what a sandbox's snapshot holds.
type SnapshotKind string

// Snapshot kinds.
const (
	// SnapshotMemory: guest memory, runtime state and the root
	// filesystem's changes; processes continue where they were on wake.
	SnapshotMemory SnapshotKind = "memory"
	// SnapshotFilesystem: the root filesystem's changes only; on wake the
	// sandbox boots again (its processes do not survive).
	SnapshotFilesystem SnapshotKind = "filesystem"
)

// SnapshotKindKeeping is the kind of snapshot a suspend asked to keep
// memory (keep_memory true) or only the filesystem (false) writes.
func SnapshotKindKeeping(memory bool) SnapshotKind {
	if memory {
		return SnapshotMemory
	}
	return SnapshotFilesystem
}

// ParseSnapshotKind parses "memory" or "filesystem".
func ParseSnapshotKind(s string) (SnapshotKind, error) {
	switch k := SnapshotKind(s); k {
	case SnapshotMemory, SnapshotFilesystem:
		return k, nil
	}
	return "", fmt.Errorf("%w: snapshot kind %q must be memory or filesystem", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Snapshot is the record of a suspended sandbox's snapshot: what it holds,
// the environment it was taken in (it is restored only there), where its
// files are (a path the hosting node's runtime owns) and how big they are.
type Snapshot struct {
	Kind        SnapshotKind
	Environment EnvironmentRef
	Format      string // the runtime's format, e.g. "runsc-checkpoint"
	Location    string // where the runtime keeps it on its node
	SizeBytes   int64
	CreatedAt   time.Time
}

// OnTimeout is what happens to a sandbox when its deadline passes.
type OnTimeout string

// Deadline actions.
const (
	OnTimeoutDelete  OnTimeout = "delete"
	OnTimeoutSuspend OnTimeout = "suspend"
)

// ParseOnTimeout parses "delete" or "suspend"; "" is delete.
func ParseOnTimeout(s string) (OnTimeout, error) {
	switch o := OnTimeout(s); o {
	case "":
		return OnTimeoutDelete, nil
	case OnTimeoutDelete, OnTimeoutSuspend:
		return o, nil
	}
	return "", fmt.Errorf("%w: on_timeout %q must be delete or suspend", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Idle and deadline bounds.
const (
	// DefaultIdleTimeout is how long a sandbox may be idle before it is
	// suspended, unless its create request says otherwise.
	DefaultIdleTimeout = 6 * time.Hour
	// MaxIdleTimeout and MaxTimeout bound what a request may ask for.
	MaxIdleTimeout = 30 * 24 * time.Hour
	MaxTimeout     = 365 * 24 * time.Hour
)

// Timeouts are a sandbox's idle limit and deadline.
type Timeouts struct {
	// Idle: a sandbox without activity for this long is suspended; 0:
	// never.
	Idle time.Duration
	// Deadline, if not zero, is when the sandbox is deleted or suspended
	// (OnTimeout), whatever its activity.
	Deadline  time.Time
	OnTimeout OnTimeout
	// SnapshotKind, with OnTimeoutSuspend, is the kind of snapshot the
	// deadline's suspend writes ("": the runtime's own): SnapshotFilesystem
	// keeps only the files (E2B's onTimeout pause with keepMemory false).
	// Stored with the deadline, before any suspend, so a restart finds it.
	SnapshotKind SnapshotKind
}
