// Package model holds Airlock's domain nouns: the typed identifiers that cross
// every boundary, the sandbox lifecycle state machine and the records that the
// store persists. Values are parsed once at the edge (HTTP, CLI, store rows) and
// stay typed inside; nothing in here performs I/O.
package model

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// ErrInvalid is wrapped by every parse error in this package so callers can map
// it to a 400 without string matching.
var ErrInvalid = errors.New("invalid value")

// idEncoding is lower-case RFC 4648 base32 without padding: 16 random bytes
// become 26 characters from [a-z2-7].
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

const idRandomLen = 26

func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on Linux ≥ 3.17; a failure is unrecoverable.
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return prefix + "_" + idEncoding.EncodeToString(b[:])
}

func parseID(kind, prefix, s string) (string, error) {
	rest, ok := strings.CutPrefix(s, prefix+"_")
	if !ok {
		return "", fmt.Errorf("%w: %s %q must start with %q", ErrInvalid, kind, textclip.Bytes(s, maxEcho), prefix+"_")
	}
	if len(rest) != idRandomLen {
		return "", fmt.Errorf("%w: %s %q has the wrong length", ErrInvalid, kind, textclip.Bytes(s, maxEcho))
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return "", fmt.Errorf("%w: %s %q contains an invalid character", ErrInvalid, kind, textclip.Bytes(s, maxEcho))
		}
	}
	return s, nil
}

// SandboxID identifies a sandbox: "sbx_" + 26 base32 characters.
type SandboxID string

// NewSandboxID returns a fresh random sandbox ID.
func NewSandboxID() SandboxID { return SandboxID(newID("sbx")) }

// ParseSandboxID parses s as a sandbox ID.
func ParseSandboxID(s string) (SandboxID, error) {
	v, err := parseID("sandbox ID", "sbx", s)
	return SandboxID(v), err
}

func (id SandboxID) String() string { return string(id) }

// OperationID identifies a lifecycle operation: "op_…".
type OperationID string

// NewOperationID returns a fresh random operation ID.
func NewOperationID() OperationID { return OperationID(newID("op")) }

// ParseOperationID parses s as an operation ID.
func ParseOperationID(s string) (OperationID, error) {
	v, err := parseID("operation ID", "op", s)
	return OperationID(v), err
}

func (id OperationID) String() string { return string(id) }

// CommandSessionID identifies a command session: "cs_…".
type CommandSessionID string

// NewCommandSessionID returns a fresh random command session ID.
func NewCommandSessionID() CommandSessionID { return CommandSessionID(newID("cs")) }

// ParseCommandSessionID parses s as a command session ID.
func ParseCommandSessionID(s string) (CommandSessionID, error) {
	v, err := parseID("command session ID", "cs", s)
	return CommandSessionID(v), err
}

func (id CommandSessionID) String() string { return string(id) }

// ProcessID identifies a process inside a sandbox: "proc_…". It is allocated
// by the management plane when a command session is created, before the
// process exists, and is the key the guest agent uses for it.
type ProcessID string

// NewProcessID returns a fresh random process ID.
func NewProcessID() ProcessID { return ProcessID(newID("proc")) }

// ParseProcessID parses s as a process ID.
func ParseProcessID(s string) (ProcessID, error) {
	v, err := parseID("process ID", "proc", s)
	return ProcessID(v), err
}

func (id ProcessID) String() string { return string(id) }

// ProjectID identifies a project (tenant): "prj_…".
type ProjectID string

// NewProjectID returns a fresh random project ID.
func NewProjectID() ProjectID { return ProjectID(newID("prj")) }

// ParseProjectID parses s as a project ID.
func ParseProjectID(s string) (ProjectID, error) {
	v, err := parseID("project ID", "prj", s)
	return ProjectID(v), err
}

func (id ProjectID) String() string { return string(id) }

// APIKeyID identifies an API key: "key_…". The ID is public (it is part of the
// bearer token); the secret half is not.
type APIKeyID string

// NewAPIKeyID returns a fresh random API key ID.
func NewAPIKeyID() APIKeyID { return APIKeyID(newID("key")) }

// ParseAPIKeyID parses s as an API key ID.
func ParseAPIKeyID(s string) (APIKeyID, error) {
	v, err := parseID("API key ID", "key", s)
	return APIKeyID(v), err
}

func (id APIKeyID) String() string { return string(id) }

// NodeID identifies a worker node: "node_…".
type NodeID string

// NewNodeID returns a fresh random node ID.
func NewNodeID() NodeID { return NodeID(newID("node")) }

// ParseNodeID parses s as a node ID.
func ParseNodeID(s string) (NodeID, error) {
	v, err := parseID("node ID", "node", s)
	return NodeID(v), err
}

func (id NodeID) String() string { return string(id) }

// maxEcho is how many bytes of a caller's value an error message quotes (textclip.Bytes).
const maxEcho = 80
