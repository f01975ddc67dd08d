package apiv1

import "time"

// Environment is one execution environment as GET /v1/environments lists it.
type Environment struct {
	Ref       string `json:"ref"`       // env:sha256:… of its canonical definition
	Name      string `json:"name"`      // runsc, crun, runc
	Isolation string `json:"isolation"` // hardware-vm, emulated-vm, user-space-kernel, shared-kernel
	// Enabled: the server's operator enabled it (--env); Available: its
	// probe ran a sandbox on this node. Reason says why it is not
	// available.
	Enabled   bool   `json:"enabled"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// CheckedAt is when this node last detected it (at its start);
	// absent: this node does not have it.
	CheckedAt *time.Time `json:"checked_at,omitempty"`
	// Default: a create that names no environment runs in this one.
	Default bool `json:"default"`
	// Snapshot is what a suspend keeps: none, filesystem or memory.
	Snapshot       string `json:"snapshot"`
	SnapshotFormat string `json:"snapshot_format,omitempty"`
	// Fork is what a fork or a saved snapshot of one of its sandboxes
	// keeps: "memory" (memory and processes continue), "filesystem" (the
	// files; processes start again) or "none" (it cannot fork); absent
	// where this server does not know.
	Fork          string             `json:"fork,omitempty"`
	OOMScope      string             `json:"oom_scope"` // process or sandbox
	Runtime       EnvironmentRuntime `json:"runtime"`
	Host          string             `json:"host"`  // os/arch
	Guest         string             `json:"guest"` // os/arch
	SchemaVersion int                `json:"schema_version"`
}

// EnvironmentRuntime is an environment's runtime binding.
type EnvironmentRuntime struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	BinaryDigest string `json:"binary_digest"` // sha256:…
}

// EnvironmentList is the response of GET /v1/environments.
type EnvironmentList struct {
	Environments []Environment `json:"environments"`
}
