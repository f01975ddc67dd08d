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

// The volume content API: a volume's files without a sandbox, under
// /v1/volumes/{id}/files. Paths are inside the volume ("/" its root).

// VolumeFile describes a file of a volume (a symlink itself, not its
// target).
type VolumeFile struct {
	Path  string    `json:"path"`
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file, directory, symlink, other
	Size  int64     `json:"size"`
	Mode  uint32    `json:"mode"` // permission bits (0o7777)
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	ATime time.Time `json:"atime"`
	MTime time.Time `json:"mtime"`
	CTime time.Time `json:"ctime"`
	// LinkTarget is a symlink's target (resolved, like every path, inside
	// the volume).
	LinkTarget string `json:"link_target,omitempty"`
}

// VolumeFileList is the response of GET /v1/volumes/{id}/files/list.
type VolumeFileList struct {
	Path    string       `json:"path"`
	Entries []VolumeFile `json:"entries"`
	// Truncated: more than 10000 entries; the first are listed.
	Truncated bool `json:"truncated,omitempty"`
}

// VolumeMkdirRequest is the body of POST /v1/volumes/{id}/files/mkdir
// (mkdir -p).
type VolumeMkdirRequest struct {
	Path string  `json:"path"`
	Mode *uint32 `json:"mode,omitempty"` // 0o755 if absent
	UID  *uint32 `json:"uid,omitempty"`  // 0 if absent (guest ids, 0–65535)
	GID  *uint32 `json:"gid,omitempty"`
}

// VolumeRemoveRequest is the body of POST /v1/volumes/{id}/files/remove.
type VolumeRemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// VolumeMoveRequest is the body of POST /v1/volumes/{id}/files/move.
type VolumeMoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// VolumeMetadataRequest is the body of POST
// /v1/volumes/{id}/files/metadata: what is absent is kept.
type VolumeMetadataRequest struct {
	Path string  `json:"path"`
	Mode *uint32 `json:"mode,omitempty"`
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
}
