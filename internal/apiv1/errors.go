package apiv1

import (
	"errors"
	"slices"
)

// ErrBodyTimeout is the cause (context.Cause) of a request's context, and
// is wrapped by its body's Read, when the client did not send the body in
// time (the server's body read deadline passed): the request answers
// CodeRequestTimeout. Handlers that stream a body elsewhere (a process's
// stdin) read the cause instead of guessing from a canceled context.
var ErrBodyTimeout = errors.New("the request body did not arrive in time")

// Error is the body of every error response: {"code": "...", "message": "..."}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Stable error codes. Clients may switch on them; they never change meaning.
// How each protocol says a code (its HTTP status, Connect code, CLI exit
// code) is in errorSpecs below, and nowhere else.
const (
	CodeInvalidRequest       = "invalid_request"        // malformed JSON, unknown field, bad value
	CodeUnauthenticated      = "unauthenticated"        // missing, malformed, unknown or revoked key
	CodeWrongTokenKind       = "wrong_token_kind"       // an attachment token on the management API or vice versa
	CodeTokenExpired         = "token_expired"          // attachment token past its expiry
	CodePermissionDenied     = "permission_denied"      // the key's role may not do this
	CodeTokenScope           = "token_scope"            // a sandbox access token used outside its sandbox's routes
	CodeCSRFFailed           = "csrf_failed"            // a request authenticated by the console's session cookie without its CSRF header, or from another origin
	CodeNotFound             = "not_found"              // no such resource in this project
	CodeTemplateNotFound     = "template_not_found"     // the template reference resolves to nothing (also a failed build's error code)
	CodeMethodNotAllowed     = "method_not_allowed"     // the route exists, the method does not
	CodeInvalidTransition    = "invalid_transition"     // the lifecycle state machine refuses the request
	CodeIdempotencyKeyReused = "idempotency_key_reused" // same Idempotency-Key, different request
	CodeAlreadyExists        = "already_exists"         // the name (or path) is taken
	CodeSandboxNotRunning    = "sandbox_not_running"    // a command needs a running sandbox
	CodeSandboxPaused        = "sandbox_paused"         // the sandbox is paused (resume it, or ask the command to resume it first)
	CodeSandboxSuspended     = "sandbox_suspended"      // the sandbox is suspended (wake it, or ask the command to wake it first)
	CodeSandboxBusy          = "sandbox_busy"           // another lifecycle operation of the sandbox is under way; retry once it finished
	CodeResumeTimeout        = "resume_timeout"         // the resume (or wake) a request asked for did not finish in time
	CodeExecFailed           = "exec_failed"            // the command could not be started (not found, not executable, bad cwd, unknown user, the sandbox's pids limit reached); mostly an SSE error event
	CodePayloadTooLarge      = "payload_too_large"      // the request body is over its limit
	CodeUnsupportedMedia     = "unsupported_media_type" // the request body's Content-Type is not the one the route takes
	CodeNotSupported         = "not_supported"          // a capability this deployment lacks
	CodeInternal             = "internal"               // the server failed; the message says nothing of why (the log does)
	CodeUnavailable          = "unavailable"            // the server or the sandbox cannot take the request now (not ready, the sandbox's agent unreachable or shutting down, a build still running); retry
	CodeDraining             = "draining"               // this server is shutting down; retry (another replica, or after restart)
	CodeNodeUnreachable      = "node_unreachable"       // the node hosting the sandbox could not be reached from this replica; the message names it
	CodeTooManyAttachments   = "too_many_attachments"   // the process, token, project or server has as many open attachments as allowed
	CodeTooManyStdinStreams  = "too_many_stdin_streams" // the token or project has as many open stdin streams (POST …/stdin) as allowed
	CodeTooManyConnections   = "too_many_connections"   // the client address, the unauthenticated share or the project has as many connections open as allowed; the server closes the connection
	CodeNoStdin              = "no_stdin"               // the process's stdin is not open (not requested, or closed)
	CodeNoPTY                = "no_pty"                 // resize of a process without a terminal
	CodeProcessExited        = "process_exited"         // the process has exited
	CodeProcessNotFound      = "process_not_found"      // the sandbox has no such process (never started, or forgotten)
	CodeNodeNotFound         = "node_not_found"         // no node with this ID is registered
	CodeAgentUnsupported     = "agent_unsupported"      // the sandbox's agent is too old for this request
	CodeExceedsCapacity      = "exceeds_node_capacity"  // more cpus, memory, disk or host pids than one sandbox can have on this node
	CodeTooManyWatches       = "too_many_watches"       // the API key or project has as many live sandbox lists (GET /v1/watch/sandboxes) open as allowed
	CodeRateLimited          = "rate_limited"           // this API key made too many changes in a short time; see Retry-After
	CodeQuotaExceeded        = "quota_exceeded"         // the project's quota does not admit the new sandbox (the message names the limit, the usage and the request)
	CodeRequestTimeout       = "request_timeout"        // the request body did not arrive in time; the server closes the connection
	CodeRegistryUnavailable  = "registry_unavailable"   // an image registry could not be reached or failed (network error, 5xx, rate limit); a build's error code
	CodeTemplateInUse        = "template_in_use"        // a template (or tag) delete while live sandboxes use the digest
	CodeBlobStoreUnavailable = "blob_store_unavailable" // the shared blob store could not be reached or failed
	CodeBlobStoreCorrupt     = "blob_store_corrupt"     // a template in the shared blob store does not verify against its digest; nothing was imported
	CodeBuildFailed          = "build_failed"           // a create whose template's build failed; also a failed build's error code
	CodeUnknownEgressProfile = "unknown_egress_profile" // an egress policy names a profile that does not exist
	CodeEgressProfileInUse   = "egress_profile_in_use"  // a profile delete while the policy of a sandbox that is not deleted names it
	CodeSnapshotNotFound     = "snapshot_not_found"     // the project has no such saved snapshot (another project's is not found either)
	CodeSnapshotNotReady     = "snapshot_not_ready"     // the snapshot is being made, failed or is being deleted: no sandbox starts from it
	CodeSnapshotFailed       = "snapshot_failed"        // the snapshot a fork needed could not be made (the message says why); the source runs on
	CodeTemplateNotReady     = "template_not_ready"     // a create's sandbox ran its template's start command, and the ready command did not succeed within the template's ready timeout (or the start command could not start); the sandbox was removed
	CodeNoCapacity           = "no_capacity"            // nodes could run the sandbox but none has room now (sandboxes, memory or pids budget); see Retry-After
	CodeNoEligibleNode       = "no_eligible_node"       // no live node can run the sandbox (environment, template or node selector); the message says what each lacked
	CodePortUnreachable      = "port_unreachable"       // nothing in the sandbox answered on the port the port proxy was asked for (refused, timed out, or closed before answering)
	CodeSandboxNoNetwork     = "sandbox_no_network"     // the sandbox has no network on its node, so its ports cannot be reached

	// The file endpoints.
	CodeInvalidPath         = "invalid_path"          // not an absolute clean path, too long, a magic link, or a tar entry leaving its target
	CodeNotADirectory       = "not_a_directory"       // a directory was needed
	CodeIsADirectory        = "is_a_directory"        // a file was needed
	CodeDirectoryNotEmpty   = "directory_not_empty"   // remove a directory without recursive
	CodeUnsupportedFileType = "unsupported_file_type" // a device, FIFO, socket (or, for writes, a symlink)

	// Execution environments: the three separate reasons a create's
	// environment is refused (decodable is not executable).
	CodeEnvironmentUnknown          = "environment_unknown"           // no environment has that name or reference
	CodeEnvironmentArtifactsMissing = "environment_artifacts_missing" // the environment is known, but this node no longer has its artifacts (runtime binary gone or changed)
	CodeEnvironmentUnavailable      = "environment_unavailable"       // the environment is not enabled here, or its probe failed (no healthy node runs it)

	// The Host allow-list (DNS rebinding).
	CodeHostNotAllowed = "host_not_allowed" // the request's Host is not a name this server answers to (--allowed-hosts)

	// Volumes.
	CodeVolumeNotFound = "volume_not_found" // the project has no volume of that ID or name (a create's volume_mounts, a volume route)
	CodeVolumeInUse    = "volume_in_use"    // a volume delete while a sandbox that is not deleted mounts it (the message names them)
	CodeVolumeConflict = "volume_conflict"  // the volumes a create mounts live on different nodes, or one was bound to another node meanwhile
	// Codes of a failed operation only (GET /v1/operations/{id}'s error;
	// model.OperationErrorCodes): no request is refused with them.
	CodeRuntimeError          = "runtime_error"           // the runtime failed a step of the operation (the message says how)
	CodeCancelled             = "cancelled"               // the operation was superseded: its sandbox was deleted, or changed state, before it finished
	CodeEnvironmentNotEnabled = "environment_not_enabled" // the sandbox runs on a runtime this server does not drive (its --env does not enable it)
	CodeNodeLost              = "node_lost"               // the sandbox's node was declared dead before the operation finished
	CodeVolumeFull            = "volume_full"             // a write of the volume content API found the volume's filesystem full (its size is its hard limit)
)

// ErrorSpec is one code of the error vocabulary and how each of Airlock's
// protocols says it. The server's packages take the status of an error
// from here (internal/api, internal/dataplane, internal/guestops), the E2B
// translation its Connect code and REST status (internal/e2b/connecterr,
// internal/e2b/control), the CLI its exit code (internal/cli); docs/errors.md
// shows the same table to people (a test keeps the two equal).
type ErrorSpec struct {
	Code string
	// Status is the HTTP status of a response with this code, on the
	// management API and the data plane alike.
	Status int
	// AltStatus, when not 0, is the one other status some routes answer
	// with this code, each such route documented in the OpenAPI document.
	AltStatus int
	// Connect is the Connect code of this error in Airlock's E2B envd
	// protocol, by its wire name (connect.Code's String: "not_found").
	// Kept as text so that this package links no Connect;
	// internal/e2b/connecterr parses it.
	Connect string
	// E2BOperationStatus is the status of Airlock's E2B REST API when a
	// native operation (a create, a resume) failed with this code; 0:
	// 500. An error the native API answered at once keeps its Status.
	E2BOperationStatus int
	// Exit is the exit code of the airlock CLI when a command fails with
	// this error, a request refused with it or a command's stream ending
	// with it (see docs/errors.md for the one exception, exec_failed).
	Exit int
}

// errorSpecs is the vocabulary: one entry per code, in the order of the
// constants. Statuses are literal numbers, not net/http's names, so that
// this package stays free of heavy imports.
var errorSpecs = []ErrorSpec{
	{Code: CodeInvalidRequest, Status: 400, Connect: "invalid_argument", Exit: 1},
	{Code: CodeUnauthenticated, Status: 401, Connect: "unauthenticated", Exit: 1},
	{Code: CodeWrongTokenKind, Status: 401, Connect: "unauthenticated", Exit: 1},
	{Code: CodeTokenExpired, Status: 401, Connect: "unauthenticated", Exit: 1},
	{Code: CodePermissionDenied, Status: 403, Connect: "permission_denied", Exit: 1},
	{Code: CodeTokenScope, Status: 403, Connect: "permission_denied", Exit: 1},
	{Code: CodeCSRFFailed, Status: 403, Connect: "permission_denied", Exit: 1},
	{Code: CodeNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeTemplateNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeMethodNotAllowed, Status: 405, Connect: "internal", Exit: 1},
	{Code: CodeInvalidTransition, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeIdempotencyKeyReused, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeAlreadyExists, Status: 409, Connect: "already_exists", Exit: 1},
	{Code: CodeSandboxNotRunning, Status: 409, Connect: "unavailable", Exit: 1},
	{Code: CodeSandboxPaused, Status: 409, Connect: "unavailable", Exit: 1},
	{Code: CodeSandboxSuspended, Status: 409, Connect: "unavailable", Exit: 1},
	{Code: CodeSandboxBusy, Status: 409, Connect: "unavailable", Exit: 1},
	{Code: CodeResumeTimeout, Status: 504, Connect: "deadline_exceeded", E2BOperationStatus: 504, Exit: 1},
	{Code: CodeExecFailed, Status: 400, Connect: "invalid_argument", Exit: 127},
	{Code: CodePayloadTooLarge, Status: 413, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeUnsupportedMedia, Status: 415, Connect: "internal", Exit: 1},
	{Code: CodeNotSupported, Status: 501, Connect: "unimplemented", Exit: 1},
	{Code: CodeInternal, Status: 500, Connect: "internal", Exit: 1},
	{Code: CodeUnavailable, Status: 503, AltStatus: 504, Connect: "unavailable", E2BOperationStatus: 503, Exit: 1},
	{Code: CodeDraining, Status: 503, Connect: "unavailable", E2BOperationStatus: 503, Exit: 1},
	{Code: CodeNodeUnreachable, Status: 503, Connect: "unavailable", E2BOperationStatus: 503, Exit: 1},
	{Code: CodeTooManyAttachments, Status: 429, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeTooManyStdinStreams, Status: 429, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeTooManyConnections, Status: 429, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeNoStdin, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeNoPTY, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeProcessExited, Status: 409, Connect: "not_found", Exit: 1}, // envd forgets a process once it has exited
	{Code: CodeProcessNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeNodeNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeAgentUnsupported, Status: 501, Connect: "unimplemented", Exit: 1},
	{Code: CodeExceedsCapacity, Status: 400, Connect: "invalid_argument", Exit: 1},
	{Code: CodeTooManyWatches, Status: 429, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeRateLimited, Status: 429, Connect: "resource_exhausted", Exit: 1},
	{Code: CodeQuotaExceeded, Status: 403, Connect: "permission_denied", Exit: 1},
	{Code: CodeRequestTimeout, Status: 408, Connect: "deadline_exceeded", Exit: 1},
	{Code: CodeRegistryUnavailable, Status: 502, Connect: "unavailable", Exit: 1},
	{Code: CodeTemplateInUse, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeBlobStoreUnavailable, Status: 502, Connect: "unavailable", Exit: 1},
	{Code: CodeBlobStoreCorrupt, Status: 502, Connect: "unavailable", Exit: 1},
	{Code: CodeBuildFailed, Status: 424, Connect: "internal", Exit: 1},
	{Code: CodeUnknownEgressProfile, Status: 400, Connect: "invalid_argument", Exit: 1},
	{Code: CodeEgressProfileInUse, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeSnapshotNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeSnapshotNotReady, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeSnapshotFailed, Status: 500, Connect: "internal", Exit: 1},
	{Code: CodeTemplateNotReady, Status: 500, Connect: "internal", Exit: 1},
	{Code: CodeNoCapacity, Status: 503, Connect: "unavailable", E2BOperationStatus: 503, Exit: 1},
	{Code: CodeNoEligibleNode, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodePortUnreachable, Status: 502, Connect: "unavailable", Exit: 1},
	{Code: CodeSandboxNoNetwork, Status: 409, Connect: "failed_precondition", Exit: 1},

	{Code: CodeInvalidPath, Status: 400, Connect: "invalid_argument", Exit: 1},
	{Code: CodeNotADirectory, Status: 409, Connect: "invalid_argument", Exit: 1},
	{Code: CodeIsADirectory, Status: 409, Connect: "invalid_argument", Exit: 1},
	{Code: CodeDirectoryNotEmpty, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeUnsupportedFileType, Status: 400, Connect: "invalid_argument", Exit: 1},

	{Code: CodeEnvironmentUnknown, Status: 400, Connect: "invalid_argument", Exit: 1},
	{Code: CodeEnvironmentArtifactsMissing, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeEnvironmentUnavailable, Status: 409, Connect: "failed_precondition", Exit: 1},

	{Code: CodeHostNotAllowed, Status: 421, Connect: "permission_denied", Exit: 1},

	{Code: CodeVolumeNotFound, Status: 404, Connect: "not_found", Exit: 1},
	{Code: CodeVolumeInUse, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeVolumeConflict, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeRuntimeError, Status: 500, Connect: "internal", Exit: 1},
	{Code: CodeCancelled, Status: 409, Connect: "aborted", Exit: 1},
	{Code: CodeEnvironmentNotEnabled, Status: 409, Connect: "failed_precondition", Exit: 1},
	{Code: CodeNodeLost, Status: 503, Connect: "unavailable", E2BOperationStatus: 503, Exit: 1},
	{Code: CodeVolumeFull, Status: 507, Connect: "resource_exhausted", Exit: 1},
}

// errorsByCode indexes errorSpecs.
var errorsByCode = func() map[string]ErrorSpec {
	m := make(map[string]ErrorSpec, len(errorSpecs))
	for _, s := range errorSpecs {
		m[s.Code] = s
	}
	return m
}()

// ErrorSpecs returns the vocabulary, one entry per code.
func ErrorSpecs() []ErrorSpec { return slices.Clone(errorSpecs) }

// LookupError returns the vocabulary's entry of code.
func LookupError(code string) (ErrorSpec, bool) {
	s, ok := errorsByCode[code]
	return s, ok
}

// HTTPStatus is the HTTP status of a response with code: its Status, 500
// for a code the vocabulary lacks.
func HTTPStatus(code string) int {
	if s, ok := errorsByCode[code]; ok {
		return s.Status
	}
	return 500
}

// ExitCode is the CLI's exit code for an error with code: its Exit, 1 for
// a code the vocabulary lacks (or no code at all).
func ExitCode(code string) int {
	if s, ok := errorsByCode[code]; ok {
		return s.Exit
	}
	return 1
}
