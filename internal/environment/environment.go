// Package environment describes execution environments (docs/design.md
// §Execution environments): the runtime and isolation a sandbox runs in
// (runc, crun, runsc, qemu). A versioned Definition holds everything that
// decides how a sandbox runs (host and guest platform, runtime binding,
// boot inputs, isolation class, snapshot capability, OOM scope); the
// package gives its canonical encoding and its content reference,
// model.EnvironmentRef ("env:sha256:<hex>"), and the Selector a request
// names one by.
//
// Two definitions with the same reference run sandboxes the same way. Any
// change to what a definition holds is a new SchemaVersion (the tests pin
// the fields of each version), so a reference never silently widens.
//
// Decodable is not executable: a Definition that parses says nothing about
// whether its artifacts exist on a node or whether a node runs it; those
// are separate checks (Verify, the node's detection in the registry
// sub-package, and the node records in the store).
//
// The package imports no runtime and no store: the runtimes describe
// themselves in its words (Isolation, OOMScope) and the store keeps its
// definitions, so both import it. The node's registry of environments,
// which turns a runtime's Info into a Definition and records it in the
// store, is therefore a package of its own, internal/environment/registry.
//
// Not to be confused with environment variables (model.Env).
package environment

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// SchemaVersion is the version of Definition this binary writes and reads.
// Bump it (and record the new field list in the tests) whenever a field is
// added, removed or changes meaning.
const SchemaVersion = 1

// maxDefinitionBytes bounds a definition's encoding.
const maxDefinitionBytes = 64 << 10

// Name names an execution environment as operators and clients write it.
type Name string

// Known environments.
const (
	NameRunsc Name = "runsc" // gVisor: user-space kernel
	NameCrun  Name = "crun"  // OCI, shared kernel
	NameRunc  Name = "runc"  // OCI, shared kernel
	// NameQEMU: QEMU microVMs (internal/runtime/qemu), each sandbox with
	// its own kernel; hardware-vm under KVM, emulated-vm under TCG.
	NameQEMU Name = "qemu"
)

// Names returns every known environment name, strongest isolation first
// (a VM's isolation is hardware-vm or emulated-vm; both are above a
// user-space kernel).
func Names() []Name { return []Name{NameQEMU, NameRunsc, NameCrun, NameRunc} }

// ParseName parses the name of a known environment.
func ParseName(s string) (Name, error) {
	for _, n := range Names() {
		if string(n) == s {
			return n, nil
		}
	}
	known := make([]string, 0, len(Names()))
	for _, n := range Names() {
		known = append(known, string(n))
	}
	return "", fmt.Errorf("%w: unknown execution environment %q (known: %s)", model.ErrInvalid, truncate(s), strings.Join(known, ", "))
}

func (n Name) String() string { return string(n) }

// IsOCI reports whether the environment is driven by an OCI runtime binary
// of the same name (internal/runtime/oci's flavor).
func (n Name) IsOCI() bool { return n == NameRunc || n == NameCrun || n == NameRunsc }

// Platform is an operating system and CPU architecture, as Go names them.
type Platform struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Digest is "sha256:" and 64 lower-case hex digits.
type Digest string

// ParseDigest parses "sha256:<64 lower-case hex>".
func ParseDigest(s string) (Digest, error) {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		return "", fmt.Errorf("%w: digest %q must be sha256: and 64 lower-case hex digits", model.ErrInvalid, truncate(s))
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%w: digest %q: %v", model.ErrInvalid, truncate(s), err)
	}
	return Digest(s), nil
}

// DigestOf is the Digest of a SHA-256 sum.
func DigestOf(sum [32]byte) Digest { return Digest("sha256:" + hex.EncodeToString(sum[:])) }

// RuntimeBinding is the runtime that runs the environment's sandboxes.
type RuntimeBinding struct {
	Name    string `json:"name"`    // runtime.Info.Name
	Version string `json:"version"` // as the binary reports it
	// BinaryDigest is the SHA-256 of the runtime's binary file.
	BinaryDigest Digest `json:"binary_digest"`
}

// Boot is what a virtual machine boots from; empty for OCI runtimes.
type Boot struct {
	KernelDigest    Digest `json:"kernel_digest,omitempty"`
	InitramfsDigest Digest `json:"initramfs_digest,omitempty"`
	CommandLine     string `json:"command_line,omitempty"`
}

// Isolation is an isolation class, from docs/design.md §Execution environments:
// what stands between a sandbox and the host. Runtimes declare theirs in
// their Info (internal/runtime).
type Isolation string

// Isolation classes, strongest first.
const (
	IsolationHardwareVM      Isolation = "hardware-vm"
	IsolationEmulatedVM      Isolation = "emulated-vm"
	IsolationUserSpaceKernel Isolation = "user-space-kernel"
	IsolationSharedKernel    Isolation = "shared-kernel"
)

// OOMScope says what the host kills when a sandbox exceeds its memory limit.
type OOMScope string

// OOM scopes.
const (
	// OOMKillsProcess: the kernel OOM killer kills a process inside the
	// sandbox; the sandbox keeps running (runc, crun).
	OOMKillsProcess OOMScope = "process"
	// OOMKillsSandbox: the whole sandbox dies, because all guest memory is
	// charged to one host process (gVisor's sentry, a VMM).
	OOMKillsSandbox OOMScope = "sandbox"
)

// SnapshotCapability says what a suspend of a sandbox keeps.
type SnapshotCapability string

// Snapshot capabilities.
const (
	SnapshotNone       SnapshotCapability = "none"
	SnapshotFilesystem SnapshotCapability = "filesystem" // the root filesystem's changes
	SnapshotMemory     SnapshotCapability = "memory"     // memory, runtime state and the filesystem's changes
)

// ParseSnapshotCapability parses "none", "filesystem" or "memory".
func ParseSnapshotCapability(s string) (SnapshotCapability, error) {
	switch c := SnapshotCapability(s); c {
	case SnapshotNone, SnapshotFilesystem, SnapshotMemory:
		return c, nil
	}
	return "", fmt.Errorf("%w: snapshot capability %q must be none, filesystem or memory", model.ErrInvalid, truncate(s))
}

// SnapshotCapabilityOf is what a suspend keeps for a runtime whose
// snapshots are of kind k ("": it writes none).
func SnapshotCapabilityOf(k model.SnapshotKind) SnapshotCapability {
	switch k {
	case model.SnapshotMemory:
		return SnapshotMemory
	case model.SnapshotFilesystem:
		return SnapshotFilesystem
	}
	return SnapshotNone
}

// Snapshot is the environment's snapshot capability and the runtime's
// format of it ("" when the runtime names none).
type Snapshot struct {
	Capability SnapshotCapability `json:"capability"`
	Format     string             `json:"format,omitempty"`
}

// Definition is one execution environment. Its reference is Ref.
type Definition struct {
	SchemaVersion int            `json:"schema_version"`
	Name          Name           `json:"name"`
	Host          Platform       `json:"host"`
	Runtime       RuntimeBinding `json:"runtime"`
	Guest         Platform       `json:"guest"`
	Boot          Boot           `json:"boot"`
	Isolation     Isolation      `json:"isolation"`
	Snapshot      Snapshot       `json:"snapshot"`
	OOMScope      OOMScope       `json:"oom_scope"`
}

// Validate checks every field of d.
func (d Definition) Validate() error {
	if d.SchemaVersion != SchemaVersion {
		return fmt.Errorf("%w: environment schema version %d (this binary knows %d)", model.ErrInvalid, d.SchemaVersion, SchemaVersion)
	}
	var errs []error
	if _, err := ParseName(string(d.Name)); err != nil {
		errs = append(errs, err)
	}
	for what, p := range map[string]Platform{"host": d.Host, "guest": d.Guest} {
		if !token(p.OS) || !token(p.Arch) {
			errs = append(errs, fmt.Errorf("%w: %s platform %q/%q: os and arch must be non-empty [a-z0-9_]", model.ErrInvalid, what, truncate(p.OS), truncate(p.Arch)))
		}
	}
	if d.Runtime.Name == "" || len(d.Runtime.Name) > 64 {
		errs = append(errs, fmt.Errorf("%w: runtime name must be 1 to 64 bytes", model.ErrInvalid))
	}
	if d.Runtime.Version == "" || len(d.Runtime.Version) > 1024 {
		errs = append(errs, fmt.Errorf("%w: runtime version must be 1 to 1024 bytes", model.ErrInvalid))
	}
	if _, err := ParseDigest(string(d.Runtime.BinaryDigest)); err != nil {
		errs = append(errs, fmt.Errorf("runtime binary: %w", err))
	}
	for what, dg := range map[string]Digest{"kernel": d.Boot.KernelDigest, "initramfs": d.Boot.InitramfsDigest} {
		if dg == "" {
			continue
		}
		if _, err := ParseDigest(string(dg)); err != nil {
			errs = append(errs, fmt.Errorf("boot %s: %w", what, err))
		}
	}
	if len(d.Boot.CommandLine) > 4096 {
		errs = append(errs, fmt.Errorf("%w: boot command line longer than 4096 bytes", model.ErrInvalid))
	}
	switch d.Isolation {
	case IsolationHardwareVM, IsolationEmulatedVM, IsolationUserSpaceKernel, IsolationSharedKernel:
	default:
		errs = append(errs, fmt.Errorf("%w: isolation %q", model.ErrInvalid, truncate(string(d.Isolation))))
	}
	if _, err := ParseSnapshotCapability(string(d.Snapshot.Capability)); err != nil {
		errs = append(errs, err)
	}
	if d.Snapshot.Capability == SnapshotNone && d.Snapshot.Format != "" {
		errs = append(errs, fmt.Errorf("%w: snapshot format %q without a snapshot capability", model.ErrInvalid, truncate(d.Snapshot.Format)))
	}
	if len(d.Snapshot.Format) > 128 {
		errs = append(errs, fmt.Errorf("%w: snapshot format longer than 128 bytes", model.ErrInvalid))
	}
	switch d.OOMScope {
	case OOMKillsProcess, OOMKillsSandbox:
	default:
		errs = append(errs, fmt.Errorf("%w: oom scope %q", model.ErrInvalid, truncate(string(d.OOMScope))))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("environment definition: %w", err)
	}
	return nil
}

func token(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Canonical returns d's canonical encoding: JSON with the keys of every
// object sorted, no insignificant whitespace, no HTML escaping, empty
// optional fields left out. It validates d first.
func (d Definition) Canonical() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode environment definition: %w", err)
	}
	return canonicalJSON(raw)
}

// Ref is d's reference: model.EnvironmentRefOf the SHA-256 of Canonical.
func (d Definition) Ref() (model.EnvironmentRef, error) {
	c, err := d.Canonical()
	if err != nil {
		return "", err
	}
	return model.EnvironmentRefOf(sha256.Sum256(c)), nil
}

// canonicalJSON re-encodes a JSON document with sorted keys (encoding/json
// sorts map keys) and numbers kept as written.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical environment encoding: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical environment encoding: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Parse decodes and validates a definition (the canonical encoding or any
// JSON of the same fields). Unknown fields, trailing data and schema
// versions other than SchemaVersion are refused.
func Parse(data []byte) (Definition, error) {
	if len(data) > maxDefinitionBytes {
		return Definition{}, fmt.Errorf("%w: environment definition larger than %d bytes", model.ErrInvalid, maxDefinitionBytes)
	}
	// The version first, so a newer definition is reported as such rather
	// than as unknown fields.
	var head struct {
		SchemaVersion *int `json:"schema_version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Definition{}, fmt.Errorf("%w: environment definition: %v", model.ErrInvalid, err)
	}
	if head.SchemaVersion == nil {
		return Definition{}, fmt.Errorf("%w: environment definition has no schema_version", model.ErrInvalid)
	}
	if *head.SchemaVersion != SchemaVersion {
		return Definition{}, fmt.Errorf("%w: environment schema version %d (this binary knows %d)", model.ErrInvalid, *head.SchemaVersion, SchemaVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return Definition{}, fmt.Errorf("%w: environment definition: %v", model.ErrInvalid, err)
	}
	if dec.More() {
		return Definition{}, fmt.Errorf("%w: environment definition: data after the object", model.ErrInvalid)
	}
	if err := d.Validate(); err != nil {
		return Definition{}, err
	}
	return d, nil
}

// Selector is what a request names an environment by: its Name or its
// reference (exactly one is set).
type Selector struct {
	Name Name
	Ref  model.EnvironmentRef
}

// ParseSelector parses a name ("runsc") or a reference ("env:sha256:…").
func ParseSelector(s string) (Selector, error) {
	if strings.HasPrefix(s, "env:") {
		r, err := model.ParseEnvironmentRef(s)
		if err != nil {
			return Selector{}, err
		}
		return Selector{Ref: r}, nil
	}
	n, err := ParseName(s)
	if err != nil {
		return Selector{}, err
	}
	return Selector{Name: n}, nil
}

func (s Selector) String() string {
	if s.Ref != "" {
		return string(s.Ref)
	}
	return string(s.Name)
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
