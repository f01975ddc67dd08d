package apiv1

import "time"

// The lifecycle routes POST /v1/sandboxes/{id}/pause|resume|suspend|wake
// take no body (suspend: an optional SuspendRequest) and answer 202
// SandboxWithOperation, as create does.

// SuspendRequest is the optional body of POST /v1/sandboxes/{id}/suspend.
type SuspendRequest struct {
	// KeepMemory, if set, is what the suspend must keep: true, memory and
	// processes (runsc, qemu); false, only the filesystem, processes end
	// (runc, crun). A runtime whose suspend keeps the other refuses with
	// 501 not_supported; absent, the runtime's suspend keeps what it can.
	KeepMemory *bool `json:"keep_memory,omitempty"`
}

// Snapshot kinds: what a suspend kept.
const (
	// SnapshotMemory: memory, processes and the filesystem; on wake the
	// processes continue where they were.
	SnapshotMemory = "memory"
	// SnapshotFilesystem: the root filesystem's changes only; on wake the
	// sandbox boots again and its processes are gone.
	SnapshotFilesystem = "filesystem"
)

// Snapshot describes a suspended sandbox's snapshot.
type Snapshot struct {
	Kind        string    `json:"kind"`        // SnapshotMemory or SnapshotFilesystem
	Environment string    `json:"environment"` // env:sha256:… it was taken in (restored only there); "" if unknown
	SizeBytes   int64     `json:"size_bytes"`
	CreatedAt   time.Time `json:"created_at"`
}
