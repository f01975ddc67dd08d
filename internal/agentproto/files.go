package agentproto

import "time"

// File endpoints (all under /v1/files). Every path is a query parameter or
// JSON field holding an absolute, clean guest path (see model.GuestPath):
// no "..", no NUL, at most 4096 bytes, no component over 255 bytes. The
// agent resolves paths inside its files root (the sandbox's "/") with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS), so no symlink leads out of
// it, and works only on regular files, directories and (for stat, list,
// move and remove) symlinks themselves: device nodes, FIFOs and sockets are
// refused with CodeUnsupportedFileType. Remove and move never follow a
// symlink in the final component.
//
//	GET  /v1/files/stat?path=P                → FileInfo (the final symlink is not followed)
//	GET  /v1/files/list?path=P                → FileList (entries sorted by name)
//	POST /v1/files/mkdir                      MkdirRequest → 200 FileInfo (like mkdir -p)
//	POST /v1/files/move                       MoveRequest → 204
//	POST /v1/files/remove                     RemoveRequest → 204
//	POST /v1/files/metadata                   SetMetadataRequest → 200 FileInfo
//	GET  /v1/files/content?path=P             → 200 raw bytes (application/octet-stream, Content-Length)
//	PUT  /v1/files/content?path=P[&mode=0644] raw body → 200 FileInfo (written to a temp file beside P, then renamed over it)
//	GET  /v1/files/tar?path=D                 → 200 application/x-tar of directory D (names relative to D)
//	PUT  /v1/files/tar?path=D                 tar body → 200 TarResult (D is created if missing)
//	GET  /v1/files/watch?path=D               → stream of FileEvent (NDJSON), until the client goes away
//
// Every endpoint also takes the optional query parameter user=<uid>:<gid>
// (QueryFileUser): the request's file system calls then run as that user.
//
// Errors are JSON Error with the file codes below.

// File types of FileInfo.Type.
const (
	FileTypeFile      = "file"
	FileTypeDirectory = "directory"
	FileTypeSymlink   = "symlink"
	FileTypeOther     = "other" // device, FIFO or socket: listed, never read or written
)

// FileInfo describes one file (lstat semantics).
type FileInfo struct {
	Path       string    `json:"path"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"` // permission bits and setuid/setgid/sticky (0o7777)
	ModTime    time.Time `json:"mod_time"`
	LinkTarget string    `json:"link_target,omitempty"` // symlinks
	// UID and GID own the file (numeric: names are the guest's business).
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Metadata is the file's user-defined metadata: its extended
	// attributes in the FileMetadataXattrPrefix namespace, the prefix
	// stripped (regular files and directories only; nil when none or
	// when the caller may not read the file).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// FileList is the response of GET /v1/files/list. At most MaxListEntries
// entries are returned; Truncated says there were more.
type FileList struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// MaxListEntries bounds one directory listing.
const MaxListEntries = 10000

// MkdirRequest creates a directory and its missing parents. Mode defaults to 0o755.
//
// With Owner (FeatureMkdirOwner; the request then names no user) every
// directory the call creates belongs to Owner, also where only root may
// create it (under "/"): the agent has no CAP_CHOWN, so it creates such a
// directory as Owner inside a staging directory of its own beside it and
// renames it into place.
type MkdirRequest struct {
	Path  string    `json:"path"`
	Mode  uint32    `json:"mode,omitempty"`
	Owner *FileUser `json:"owner,omitempty"`
}

// FeatureMkdirOwner: MkdirRequest.Owner is honoured.
const FeatureMkdirOwner = "mkdir-owner"

// FeatureFileMetadata: FileInfo carries UID, GID and Metadata, and
// POST /v1/files/metadata sets a file's metadata.
const FeatureFileMetadata = "file-metadata"

// FileMetadataXattrPrefix is the extended attribute namespace of file
// metadata (E2B's envd keeps its file metadata there too).
const FileMetadataXattrPrefix = "user.e2b."

// SetMetadataRequest replaces the metadata of Path (a regular file or a
// directory, never followed through a final symlink): every attribute of
// the FileMetadataXattrPrefix namespace goes, then Metadata's are set.
// Metadata is checked as model.ParseFileMetadata checks it.
//
//	POST /v1/files/metadata SetMetadataRequest → 200 FileInfo
type SetMetadataRequest struct {
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata"`
}

// MoveRequest renames From to To. Without Overwrite an existing To is
// CodeAlreadyExists.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// RemoveRequest removes a file, symlink or empty directory; with Recursive,
// a directory and everything in it.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// TarResult is the response of PUT /v1/files/tar.
type TarResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"` // file content bytes written
}

// File event types.
const (
	FileEventCreate = "create"
	FileEventWrite  = "write"
	FileEventRemove = "remove"
	FileEventRename = "rename" // From is the old path when the agent saw it
)

// FileEvent is one line of a watch stream. The first line of every stream
// is {"type":"ready"} once the watch is in place.
type FileEvent struct {
	Type  string `json:"type"`
	Path  string `json:"path,omitempty"`
	From  string `json:"from,omitempty"`
	IsDir bool   `json:"is_dir,omitempty"`
	// NetworkFS (the ready event only) names the network file system the
	// watched directory is on ("nfs", "cifs", "smb", "fuse"), where events
	// may be unreliable; empty for a local one.
	NetworkFS string `json:"network_fs,omitempty"`
}

// FileEventReady is the type of the first event of a watch stream.
const FileEventReady = "ready"

// File error codes.
const (
	// CodeInvalidPath (400): not an absolute clean path, too long, a
	// symlink loop or magic link, or a tar entry that leaves its target.
	CodeInvalidPath = "invalid_path"
	// CodeNotADirectory (409): a directory was needed.
	CodeNotADirectory = "not_a_directory"
	// CodeIsADirectory (409): a file was needed.
	CodeIsADirectory = "is_a_directory"
	// CodeAlreadyExists (409): the target exists.
	CodeAlreadyExists = "already_exists"
	// CodeDirectoryNotEmpty (409): remove without recursive.
	CodeDirectoryNotEmpty = "directory_not_empty"
	// CodeUnsupportedFileType (400): a device, FIFO or socket.
	CodeUnsupportedFileType = "unsupported_file_type"
	// CodePermissionDenied (403): the guest kernel refused (EACCES, EPERM, EROFS).
	CodePermissionDenied = "permission_denied"
)
