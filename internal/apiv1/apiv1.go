// Package apiv1 holds the JSON wire types of Airlock's management API (/v1)
// and of the data plane's SSE events. The server (internal/api,
// internal/dataplane) and the Go client (internal/client) share them; the
// OpenAPI document served at /openapi.json describes the same shapes. It
// also holds the error vocabulary (ErrorSpecs): every error code once, with
// its HTTP status, Connect code, E2B REST status and CLI exit code.
package apiv1

import "time"

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"` // sha256:… digest
	CPUs        int               `json:"cpus"`
	MemoryMiB   int               `json:"memory_mib"`
	DiskMiB     int               `json:"disk_mib"` // size of the writable layer
	Env         map[string]string `json:"env"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	StateReason string            `json:"state_reason,omitempty"`
	Snapshot    *Snapshot         `json:"snapshot"` // what its suspend kept: set while suspended (and waking), null otherwise
	Runtime     string            `json:"runtime,omitempty"`
	// NodeID is the node hosting it (absent until placed);
	// NodeSelector the labels its node must carry, as asked at create.
	NodeID       string            `json:"node_id,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Environment is the env:sha256:… reference of its execution
	// environment (absent for sandboxes made before environments existed).
	Environment string `json:"environment,omitempty"`
	// Source is how its create got it running: "cold", "pool" (a warm
	// pool's sandbox) or "snapshot" (a base snapshot restored).
	Source string `json:"source,omitempty"`
	// PublicPorts: its guest ports answer without a credential through
	// the E2B gateway (CreateSandboxRequest.PublicPorts).
	PublicPorts bool `json:"public_ports,omitempty"`
	// VolumeMounts are the volumes it mounts.
	VolumeMounts []VolumeMount `json:"volume_mounts,omitempty"`
	// FromSnapshot is the saved snapshot (snp_…) it was created from: a
	// fork's, or a create's "snapshot".
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Egress is the sandbox's egress policy as given; shown by create and
	// GET /v1/sandboxes/{id}, omitted in lists.
	Egress    *EgressPolicy `json:"egress,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`

	// TimeoutAt is the sandbox's deadline (null: none), OnTimeout what
	// happens then ("delete" or "suspend"). The deadline is cleared once
	// it was acted on.
	TimeoutAt *time.Time `json:"timeout_at"`
	OnTimeout string     `json:"on_timeout"`
	// TimeoutKeepMemory, with on_timeout suspend, is what the deadline's
	// suspend keeps: true memory and processes, false only the
	// filesystem; absent: what the runtime's suspend keeps.
	TimeoutKeepMemory *bool `json:"timeout_keep_memory,omitempty"`
	// IdleTimeout is its idle limit in seconds (0: never suspended for
	// idleness); LastActivityAt when it was last used (null: not
	// recorded), as last written to the store (activity is flushed every
	// few seconds).
	IdleTimeout    int64      `json:"idle_timeout"`
	LastActivityAt *time.Time `json:"last_activity_at"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Omitted fields take
// defaults: template "default", 1 CPU, 512 MiB, the server's disk_mib
// (10240 unless its operator chose another).
type CreateSandboxRequest struct {
	Template  string            `json:"template,omitempty"`
	CPUs      int               `json:"cpus,omitempty"`
	MemoryMiB int               `json:"memory_mib,omitempty"`
	DiskMiB   int               `json:"disk_mib,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// Egress is the sandbox's egress policy; absent: the server's default
	// with no rules.
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Environment is the execution environment: a name (runsc) or a
	// reference (env:sha256:…); absent: the server's default.
	Environment string `json:"environment,omitempty"`
	// Timeout, in seconds, sets a deadline that long after the create;
	// 0 or absent: none. OnTimeout says what happens then: "delete"
	// (default) or "suspend".
	Timeout   int64  `json:"timeout,omitempty"`
	OnTimeout string `json:"on_timeout,omitempty"`
	// TimeoutKeepMemory, only with on_timeout suspend, is what the
	// deadline's suspend must keep (as POST …/suspend's keep_memory):
	// false, only the filesystem (processes end; a wake boots again);
	// true, memory and processes; absent, what the runtime's suspend
	// keeps. A runtime that cannot is refused (501 not_supported).
	TimeoutKeepMemory *bool `json:"timeout_keep_memory,omitempty"`
	// IdleTimeout, in seconds, is how long the sandbox may go without
	// activity before it is suspended; absent: the server's default
	// (--default-idle-timeout, 6 h unless its operator chose another);
	// 0: never.
	IdleTimeout *int64 `json:"idle_timeout,omitempty"`
	// NodeSelector: labels the node that runs it must carry (KEY: VALUE;
	// nodes get theirs from airlock server --label).
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// PublicPorts makes its guest ports answer without a credential
	// through the E2B gateway, as an E2B sandbox's do (not the code
	// interpreter's); the E2B API's create sets it.
	PublicPorts bool `json:"public_ports,omitempty"`
	// VolumeMounts are the project's volumes to mount (read-write); the
	// sandbox runs on the node that holds them.
	VolumeMounts []VolumeMountRequest `json:"volume_mounts,omitempty"`
	// Snapshot, if set (snp_…), starts the sandbox from that saved
	// snapshot of the project: its template, resources, environment and
	// egress policy are the snapshot's (template, cpus, memory_mib,
	// disk_mib and environment must then be absent), on the node that
	// holds it.
	Snapshot string `json:"snapshot,omitempty"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: a new
// deadline Timeout seconds from now (0: none) and, if given, what happens
// then (else the sandbox's current on_timeout stays).
type SetTimeoutRequest struct {
	Timeout   int64  `json:"timeout"`
	OnTimeout string `json:"on_timeout,omitempty"`
	// TimeoutKeepMemory is as CreateSandboxRequest's; absent: the
	// sandbox's stays unless on_timeout is given (then the runtime's).
	TimeoutKeepMemory *bool `json:"timeout_keep_memory,omitempty"`
}

// SandboxWithOperation is the 202 response of POST /v1/sandboxes.
type SandboxWithOperation struct {
	Sandbox   Sandbox   `json:"sandbox"`
	Operation Operation `json:"operation"`
}

// SandboxList is the response of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes  []Sandbox `json:"sandboxes"`
	NextCursor string    `json:"next_cursor,omitempty"` // pass as ?cursor= for the next page
}

// Operation tracks one asynchronous lifecycle request.
type Operation struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`  // create, delete, pause, resume, suspend, wake
	State     string `json:"state"` // pending, running, succeeded, failed
	SandboxID string `json:"sandbox_id"`
	Error     *Error `json:"error,omitempty"`
	Attempts  int    `json:"attempts"`
	// Source, for a create that succeeded, is how it got the sandbox
	// running (see Sandbox.Source).
	Source string `json:"source,omitempty"`
	// NotBefore is set while a retried operation waits out its backoff:
	// it is not attempted again before then.
	NotBefore  *time.Time `json:"not_before,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// OperationList is the response of GET /v1/operations, newest first.
type OperationList struct {
	Operations []Operation `json:"operations"`
	NextCursor string      `json:"next_cursor,omitempty"` // pass as ?cursor= for the next page
}

// OperationResponse is the 202 response of DELETE /v1/sandboxes/{id}.
type OperationResponse struct {
	Operation Operation `json:"operation"`
}

// Template is an imported template.
type Template struct {
	Digest    string    `json:"digest"`
	Names     []string  `json:"names"` // its tags, "name:tag", sorted
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Config is the runtime configuration recorded in its manifest.
	Config *TemplateConfig `json:"config,omitempty"`
	// InUse is how many live sandboxes use it (GET routes).
	InUse *int `json:"in_use,omitempty"`
}

// TemplateList is the response of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// ImportTemplateRequest is the body of POST /v1/templates (admin only): import
// a template and optionally point a name at it. Source is either a clean
// absolute path on the server host of a directory or a tar archive (.tar,
// .tar.gz, .tgz), or an OCI image reference: "registry/repo:tag" or
// "registry/repo@sha256:…" with an explicit registry host (or any reference
// after "docker://", where Docker Hub is the default registry), pulled with
// anonymous auth; "oci-layout:DIR" or "docker-archive:FILE.tar" with a clean
// absolute server path. A template digest "sha256:…" pulls that template from the
// blob store shared by nodes (the server's --blob-store).
//
// Exactly one of Source and Recipe is set. Recipe is the text of a recipe
// (YAML, see docs/templates.md); Context is a clean absolute directory on
// the server host that the recipe's copy sources are relative to. The
// import or build runs in the background: the response (202) is the Build.
//
// RegistryAuth, only with a registry source, is the user name and password
// (or token) the pull presents to that registry (HTTP basic, or the
// registry's token service): kept in the memory of the server that took
// the request for that build only, never stored, logged or returned.
type ImportTemplateRequest struct {
	Source       string        `json:"source,omitempty"`
	Name         string        `json:"name,omitempty"`
	Recipe       string        `json:"recipe,omitempty"`
	Context      string        `json:"context,omitempty"`
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
}

// RegistryAuth is a registry's credentials for one pull.
type RegistryAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Build is a template build or import, run in the background.
type Build struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`             // import, recipe
	Source string `json:"source,omitempty"` // the import's source; "recipe", or "default" for the server's default build
	Name   string `json:"name,omitempty"`
	State  string `json:"state"` // pending, running, succeeded, failed
	Error  *Error `json:"error,omitempty"`
	Digest string `json:"digest,omitempty"` // when succeeded
	// Recipe steps done (of them, from the cache) of the total; absent
	// when unknown.
	StepsDone   int        `json:"steps_done,omitempty"`
	StepsCached int        `json:"steps_cached,omitempty"`
	StepsTotal  int        `json:"steps_total,omitempty"`
	Attempts    int        `json:"attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// BuildList is the response of GET /v1/builds, newest first.
type BuildList struct {
	Builds     []Build `json:"builds"`
	NextCursor string  `json:"next_cursor,omitempty"` // pass as ?cursor= for the next page
}

// Events of GET /v1/builds/{id}/log (text/event-stream).
const (
	EventBuildLog      = "log"      // BuildLogEventData
	EventBuildProgress = "progress" // BuildProgressEventData
	EventBuildDone     = "done"     // Build, the last event
)

// EventSandboxes is the event of GET /v1/watch/sandboxes (text/event-stream):
// data is a SandboxList.
const EventSandboxes = "sandboxes"

// BuildLogEventData is a chunk of a build's log: whole lines, but for a
// partial last line at the end of the log or after a pause, or a line cut
// at 64 KiB. A chunk never ends inside a UTF-8 character; invalid bytes
// are sent as U+FFFD, one for each. Offset is the log file's byte offset
// after the chunk (also the event's id): the point to resume from.
type BuildLogEventData struct {
	Text   string `json:"text"`
	Offset int64  `json:"offset"`
}

// BuildProgressEventData is how far a running build has come.
type BuildProgressEventData struct {
	State       string `json:"state"`
	StepsDone   int    `json:"steps_done"`
	StepsCached int    `json:"steps_cached"`
	StepsTotal  int    `json:"steps_total"`
	Entries     int    `json:"entries"` // entries imported so far
	Bytes       int64  `json:"bytes"`   // file bytes imported so far
}

// CreateCommandRequest is the body of POST /v1/sandboxes/{id}/commands.
type CreateCommandRequest struct {
	Args []string          `json:"args,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	// Stdin keeps the process's stdin open for the data plane's stdin
	// route (or a WebSocket); without it stdin reads end-of-file.
	Stdin bool `json:"stdin,omitempty"`
	// PTY runs the command on a pseudo-terminal of this size; its output
	// arrives as stdout events.
	PTY *TermSize `json:"pty,omitempty"`
	// User runs the command as these numeric IDs inside the sandbox.
	User *User `json:"user,omitempty"`
	// TimeoutSecs kills the command (and its process group) this long
	// after it starts; 0 means no timeout. At most 604800 (7 days).
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// Background starts the process now instead of on the first attach;
	// it runs whether or not anyone attaches.
	Background bool `json:"background,omitempty"`
	// Resume resumes a paused (or wakes a suspended) sandbox first and
	// waits, bounded, until it runs; without it such a sandbox refuses the
	// command with sandbox_paused (sandbox_suspended).
	Resume bool `json:"resume,omitempty"`
}

// TermSize is a terminal size in character cells (1–1000 each).
type TermSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// User is a numeric user and group inside a sandbox.
type User struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

// CommandSession is the response of POST /v1/sandboxes/{id}/commands and of
// POST /v1/sandboxes/{id}/processes/{process_id}/attachments. The process
// starts when a client attaches to AttachURL (SSE) with
// "Authorization: Bearer <attachment_token>" (or ?token=). The token is
// "alt_" + an Ed25519-signed JWT, valid until ExpiresAt (120 s).
type CommandSession struct {
	ID              string    `json:"id"`
	SandboxID       string    `json:"sandbox_id"`
	ProcessID       string    `json:"process_id"`
	AttachURL       string    `json:"attach_url"`
	AttachmentToken string    `json:"attachment_token"`
	ExpiresAt       time.Time `json:"expires_at"`
	// WebSocketURL carries stdin, output and resize both ways on one
	// connection (same token).
	WebSocketURL string `json:"websocket_url,omitempty"`
}

// Process is one process of a sandbox, as the guest reports it.
type Process struct {
	ID        string     `json:"id"`
	Pid       int        `json:"pid"`
	Args      []string   `json:"args"`
	Running   bool       `json:"running"`
	PTY       bool       `json:"pty,omitempty"`
	Stdin     bool       `json:"stdin,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	TimedOut  bool       `json:"timed_out,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	ExitedAt  *time.Time `json:"exited_at,omitempty"`
}

// ProcessList is the response of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// CreateAttachmentRequest is the optional body of
// POST /v1/sandboxes/{id}/processes/{process_id}/attachments: a new
// attachment token for an existing process, narrowed to Actions (a subset of
// "read", "stdin", "signal", "resize"; all of them if omitted). The answer
// is a CommandSession.
type CreateAttachmentRequest struct {
	Actions []string `json:"actions,omitempty"`
}

// AttachKey is one key of the attachment-token signing keyring (public
// information only).
type AttachKey struct {
	ID        string     `json:"id"`
	CreatedAt time.Time  `json:"created_at"`
	Active    bool       `json:"active"`
	NotAfter  *time.Time `json:"not_after,omitempty"` // a rotated-out key verifies tokens until then
}

// AttachKeyList is the response of POST /v1/admin/attach-keys/rotate: the
// keyring after the rotation, oldest first; the last key is the new active one.
type AttachKeyList struct {
	Keys []AttachKey `json:"keys"`
}

// Project is a tenant.
type Project struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateProjectRequest is the body of POST /v1/admin/projects.
type CreateProjectRequest struct {
	Name string `json:"name"`
}

// QuotaLimits are a project's quota: limits on its live sandboxes (every
// state but deleted) together. Null is unlimited; 0 admits nothing. It is
// also the body of PUT /v1/admin/projects/{id}/quota, which replaces the
// whole quota: an absent field is unlimited too.
type QuotaLimits struct {
	Sandboxes *int64 `json:"sandboxes"`
	CPUs      *int64 `json:"cpus"`
	MemoryMiB *int64 `json:"memory_mib"`
	DiskMiB   *int64 `json:"disk_mib"`
}

// QuotaUsage is what a project's live sandboxes hold together.
type QuotaUsage struct {
	Sandboxes int64 `json:"sandboxes"`
	CPUs      int64 `json:"cpus"`
	MemoryMiB int64 `json:"memory_mib"`
	DiskMiB   int64 `json:"disk_mib"`
}

// ProjectQuota is the response of GET and PUT /v1/admin/projects/{id}/quota.
type ProjectQuota struct {
	ProjectID string      `json:"project_id"`
	Limits    QuotaLimits `json:"limits"`
	Usage     QuotaUsage  `json:"usage"`
}

// ProjectList is the response of GET /v1/admin/projects.
type ProjectList struct {
	Projects []Project `json:"projects"`
}

// APIKey is an API key as the API shows it. Token is present only in the
// response that created the key; it is never stored.
type APIKey struct {
	ID        string     `json:"id"`
	ProjectID string     `json:"project_id"`
	Role      string     `json:"role"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Token     string     `json:"token,omitempty"`
}

// CreateAPIKeyRequest is the body of POST /v1/admin/keys.
type CreateAPIKeyRequest struct {
	ProjectID string `json:"project_id"`
	Role      string `json:"role"` // admin or member
	Name      string `json:"name,omitempty"`
	// Format is how the new key's token is spelled: "airlock" (default,
	// alk_…) or "e2b" (e2b_<hex>, which E2B SDKs accept). Both work
	// everywhere an API key does.
	Format string `json:"format,omitempty"`
}

// API key formats of CreateAPIKeyRequest.Format.
const (
	KeyFormatAirlock = "airlock"
	KeyFormatE2B     = "e2b"
)

// APIKeyList is the response of GET /v1/admin/keys.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// AttachRoute is the data plane's attach endpoint as a net/http pattern;
// {process_id} is a process ID (proc_…). Command sessions name it in
// attach_url.
const AttachRoute = "/data/v1/processes/{process_id}/attach"

// AttachPath returns AttachRoute for one process.
func AttachPath(processID string) string {
	return "/data/v1/processes/" + processID + "/attach"
}

// Data-plane routes besides attach, as net/http patterns. Each takes the
// attachment token of the process's command session, with the action the
// route needs (stdin, signal, resize, read).
const (
	StdinRoute    = "/data/v1/processes/{process_id}/stdin"  // POST raw bytes; ?close=1 closes stdin after them
	SignalRoute   = "/data/v1/processes/{process_id}/signal" // POST SignalRequest
	ResizeRoute   = "/data/v1/processes/{process_id}/resize" // POST ResizeRequest
	WebSocketPath = "/data/v1/processes/{process_id}/ws"     // GET, WebSocket upgrade
)

// ProcessDataPath returns a data-plane path of one process; suffix is
// "attach", "stdin", "signal", "resize" or "ws".
func ProcessDataPath(processID, suffix string) string {
	return "/data/v1/processes/" + processID + "/" + suffix
}

// Data-plane SSE event names on an attach stream. Event ids are the guest's
// sequence numbers: send the last one as Last-Event-ID to resume.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventError  = "error"
	// EventGap: output was dropped before this client read it (nobody was
	// attached while the process's buffer overflowed). Its data says how
	// much; the stream goes on after it.
	EventGap = "gap"
	// EventReconnect: the server is going away (graceful drain); reconnect
	// with Last-Event-ID after the advised delay. Nothing is lost. It also
	// ends a GET /v1/watch/sandboxes stream that has run its time.
	EventReconnect = "reconnect"
)

// OutputEventData is the data of stdout/stderr events: {"data":"<base64>"}.
type OutputEventData struct {
	Data []byte `json:"data"` // base64 in JSON
}

// ExitEventData is the data of the exit event.
type ExitEventData struct {
	ExitCode int    `json:"exit_code"`           // -1 if killed by a signal
	Signal   string `json:"signal,omitempty"`    // the signal's name, e.g. "KILL"
	TimedOut bool   `json:"timed_out,omitempty"` // killed because its timeout passed
}

// GapEventData is the data of a gap event.
type GapEventData struct {
	Events      uint64 `json:"events"`       // events skipped
	StdoutBytes uint64 `json:"stdout_bytes"` // stdout bytes in them
	StderrBytes uint64 `json:"stderr_bytes"` // stderr bytes in them
	Exact       bool   `json:"exact"`        // false: the byte counts are a lower bound
}

// ReconnectEventData is the data of a reconnect event.
type ReconnectEventData struct {
	Reason  string `json:"reason"`   // "draining"
	RetryMS int    `json:"retry_ms"` // advised delay before reconnecting
}

// SignalRequest is the body of a signal request: a name ("TERM", "SIGKILL")
// or a number ("9").
type SignalRequest struct {
	Signal string `json:"signal"`
}

// ResizeRequest is the body of a resize request (PTY processes).
type ResizeRequest struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// Health is the body of GET /healthz and a successful GET /readyz.
type Health struct {
	Status string `json:"status"` // "ok"
}
