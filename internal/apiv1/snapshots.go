package apiv1

import "time"

// SavedSnapshot is a snapshot of a running sandbox, a noun of its own
// (POST /v1/sandboxes/{id}/snapshots): new sandboxes start from it
// ("snapshot" in a create).
type SavedSnapshot struct {
	ID string `json:"id"` // snp_…
	// Name is its optional name (not unique; GET /v1/snapshots?name=
	// filters by it).
	Name string `json:"name,omitempty"`
	// State: creating, ready, failed or deleting.
	State string `json:"state"`
	// Storage is where its files are kept: "local" (only on its node),
	// "saving" (being pushed to the blob store) or "stored" (in the blob
	// store too: any node can start sandboxes from it).
	Storage string `json:"storage"`
	// Error says why it failed.
	Error           string `json:"error,omitempty"`
	SourceSandboxID string `json:"source_sandbox_id"`
	// Kind is what it keeps: "memory" (processes continue in the
	// sandboxes made from it) or "filesystem" (its files; processes start
	// again); set once ready.
	Kind        string    `json:"kind,omitempty"`
	Runtime     string    `json:"runtime,omitempty"`
	Environment string    `json:"environment,omitempty"`
	NodeID      string    `json:"node_id,omitempty"`
	Template    string    `json:"template"`
	CPUs        int       `json:"cpus"`
	MemoryMiB   int       `json:"memory_mib"`
	DiskMiB     int       `json:"disk_mib"`
	SizeBytes   int64     `json:"size_bytes"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// SnapshotRequest is the optional body of POST
// /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	// Name, if set, names the snapshot: 1 to 63 letters, digits, '.', '_'
	// or '-', starting with a letter or digit, not "snp_…".
	Name string `json:"name,omitempty"`
}

// SnapshotWithOperation is the 202 response of POST
// /v1/sandboxes/{id}/snapshots: the snapshot (creating) and the operation
// that writes it.
type SnapshotWithOperation struct {
	Snapshot  SavedSnapshot `json:"snapshot"`
	Operation Operation     `json:"operation"`
}

// SnapshotList is the response of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots  []SavedSnapshot `json:"snapshots"`
	NextCursor string          `json:"next_cursor,omitempty"` // pass as ?cursor= for the next page
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Count is how many sandboxes: 1 to 16; absent: 1.
	Count int `json:"count,omitempty"`
	// Metadata of the new sandboxes.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ForkResult is the 202 response of POST /v1/sandboxes/{id}/fork: the new
// sandboxes (pending) and their create operations.
type ForkResult struct {
	Sandboxes []SandboxWithOperation `json:"sandboxes"`
}
