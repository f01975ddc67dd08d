package apiv1

import "time"

// File types of FileInfo.Type.
const (
	FileTypeFile      = "file"
	FileTypeDirectory = "directory"
	FileTypeSymlink   = "symlink"
	FileTypeOther     = "other"
)

// FileInfo describes one file in a sandbox (a final symlink is not followed).
type FileInfo struct {
	Path       string    `json:"path"`
	Name       string    `json:"name"`
	Type       string    `json:"type"` // file, directory, symlink, other
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"` // permission bits (0o7777)
	ModTime    time.Time `json:"mod_time"`
	LinkTarget string    `json:"link_target,omitempty"`
	// UID and GID own the file (numeric: names are the guest's
	// /etc/passwd and /etc/group business).
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Metadata is the file's user-defined metadata (regular files and
	// directories; see SetFileMetadataRequest), absent when none.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// FileList is the response of GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"` // more than 10000 entries
}

// File operations run as the sandbox agent (root) unless they name a
// User: then the guest kernel checks permissions as that UID and primary
// GID (supplementary groups are the agent's), and files and directories
// they create belong to it. Stat and list take it as the query parameter
// user=<uid>:<gid> (FileUserQuery), the others as the body's "user".

// FileUserQuery is the query parameter of GET …/files/stat and …/files/list
// naming the user ("<uid>:<gid>") the call runs as.
const FileUserQuery = "user"

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir (mkdir -p).
// Owner (with no User) creates the missing directories as the agent and
// gives each one it creates to Owner, also where only root may create one
// (as E2B's envd makes a write's missing parents).
type MkdirRequest struct {
	Path  string `json:"path"`
	User  *User  `json:"user,omitempty"`
	Owner *User  `json:"owner,omitempty"`
}

// SetFileMetadataRequest is the body of POST
// /v1/sandboxes/{id}/files/metadata: Metadata replaces the file's
// user-defined metadata (kept as its extended attributes "user.e2b.<key>",
// where E2B's envd keeps it; empty removes it). Keys are HTTP token
// characters, lowercased; values printable ASCII; at most 32 entries of
// 3072 bytes in all. The answer is the file's FileInfo.
type SetFileMetadataRequest struct {
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata"`
	User     *User             `json:"user,omitempty"`
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/files/move.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
	User      *User  `json:"user,omitempty"`
}

// RemoveRequest is the body of POST /v1/sandboxes/{id}/files/remove.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	User      *User  `json:"user,omitempty"`
}

// RemoveResponse is the response of POST /v1/sandboxes/{id}/files/remove.
type RemoveResponse struct {
	Path string `json:"path"`
}

// Transfer directions.
const (
	DirectionDownload = "download" // GET the file's bytes
	DirectionUpload   = "upload"   // PUT raw bytes (application/octet-stream) into the file
	DirectionTarOut   = "tar-out"  // GET the directory as application/x-tar
	DirectionTarIn    = "tar-in"   // PUT a tar stream, extracted into the directory
	DirectionWatch    = "watch"    // GET a stream of FileEvent (NDJSON)
)

// CreateTransferRequest is the body of POST /v1/sandboxes/{id}/files/transfers.
type CreateTransferRequest struct {
	Path      string `json:"path"`
	Direction string `json:"direction"`
	// Resume resumes a paused (or wakes a suspended) sandbox first, as a
	// command's Resume does.
	Resume bool `json:"resume,omitempty"`
	// User is the guest user the transfer runs as (signed into the token:
	// the data plane request cannot change it).
	User *User `json:"user,omitempty"`
}

// Transfer authorizes one byte stream on the data plane: send Method to URL
// with "Authorization: Bearer <token>" (or ?token=) before ExpiresAt.
type Transfer struct {
	URL       string    `json:"url"`
	Method    string    `json:"method"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	Path      string    `json:"path"`
	Direction string    `json:"direction"`
}

// TarResult is the response of a tar-in transfer.
type TarResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// FileEvent is one line of a watch transfer (NDJSON). The first line has
// type "ready"; then create, write, remove, rename (From is the old path)
// and "overflow" (events were lost).
type FileEvent struct {
	Type  string `json:"type"`
	Path  string `json:"path,omitempty"`
	From  string `json:"from,omitempty"`
	IsDir bool   `json:"is_dir,omitempty"`
	// NetworkFS (the ready event only) names the network file system the
	// directory is on ("nfs", "cifs", "smb", "fuse"), whose events may be
	// unreliable; absent for a local one.
	NetworkFS string `json:"network_fs,omitempty"`
}

// FilesDataRoute is the data plane's file transfer endpoint as a net/http
// pattern; {direction} is one of the Direction constants.
const FilesDataRoute = "/data/v1/sandboxes/{id}/files/{direction}"

// FilesDataPath returns FilesDataRoute for one sandbox and direction.
func FilesDataPath(sandboxID, direction string) string {
	return "/data/v1/sandboxes/" + sandboxID + "/files/" + direction
}

// TransferMethod is the HTTP method of a direction ("" if unknown).
func TransferMethod(direction string) string {
	switch direction {
	case DirectionDownload, DirectionTarOut, DirectionWatch:
		return "GET"
	case DirectionUpload, DirectionTarIn:
		return "PUT"
	}
	return ""
}
