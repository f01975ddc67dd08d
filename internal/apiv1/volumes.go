package apiv1

import "time"

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	// Name is unique in the project: 1–63 of [A-Za-z0-9._-], starting
	// with a letter or digit, not "vol_…".
	Name string `json:"name"`
	// SizeMiB is the volume's size, its hard limit (16 MiB to 16 TiB).
	SizeMiB int64 `json:"size_mib"`
}

// Volume is a project's persistent volume.
type Volume struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	SizeMiB int    `json:"size_mib"`
	// NodeID is the node that holds its data; absent until a sandbox
	// first mounts it (or its content is first written).
	NodeID    string    `json:"node_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// MountedBy are the sandboxes not deleted that mount it (GET of one
	// volume only).
	MountedBy []string `json:"mounted_by,omitempty"`
	// UsedBytes is what its filesystem holds, when the node answering
	// has it mounted (GET of one volume only).
	UsedBytes *int64 `json:"used_bytes,omitempty"`
}

// VolumeList is the response of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// VolumeMountRequest is one of a create's volume mounts.
type VolumeMountRequest struct {
	// Volume is the volume's ID (vol_…) or name.
	Volume string `json:"volume"`
	// Path is where the guest sees it: absolute, clean, not a system
	// directory (/, /tmp, /etc, /usr, …) nor at or below /proc, /sys,
	// /dev, /.airlock.
	Path string `json:"path"`
}

// VolumeMount is a volume a sandbox mounts.
type VolumeMount struct {
	Volume string `json:"volume"` // its ID
	Path   string `json:"path"`
}
