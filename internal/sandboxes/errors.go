package sandboxes

import "fmt"

// Kind is what kind of refusal an Error is; the API answers each with its
// own status and code.
type Kind string

// The kinds of Error.
const (
	// NotFound: the project has no such sandbox (or no such pool).
	NotFound Kind = "not found"
	// TemplateNotFound: the template a create names does not exist (or was
	// deleted meanwhile).
	TemplateNotFound Kind = "template not found"
	// BuildFailed: the template's name has no template because its build
	// failed.
	BuildFailed Kind = "build failed"
	// Unavailable: something the request needs is not there yet (a
	// template still building); retry later.
	Unavailable Kind = "unavailable"
	// ExceedsCapacity: more than one sandbox may have on this server.
	ExceedsCapacity Kind = "exceeds capacity"
	// NotSupported: this server, or the runtime hosting the sandbox,
	// cannot do it.
	NotSupported Kind = "not supported"
	// EnvironmentUnknown: no such execution environment (or a malformed
	// name).
	EnvironmentUnknown Kind = "environment unknown"
	// EnvironmentArtifactsMissing: the environment's artifacts are not on
	// this node.
	EnvironmentArtifactsMissing Kind = "environment artifacts missing"
	// EnvironmentUnavailable: the environment is known but cannot run
	// sandboxes here (or the sandbox's runtime is not driven here).
	EnvironmentUnavailable Kind = "environment unavailable"
	// NoEligibleNode: no node can run the sandbox at all.
	NoEligibleNode Kind = "no eligible node"
	// NoCapacity: the nodes that could run it have no room now; retry.
	NoCapacity Kind = "no capacity"
	// Busy: another operation of the sandbox is unfinished; retry.
	Busy Kind = "busy"
	// InvalidTransition: the sandbox's state does not allow it.
	InvalidTransition Kind = "invalid transition"
	// SnapshotNotFound: the project has no such snapshot.
	SnapshotNotFound Kind = "snapshot not found"
	// SnapshotNotReady: the snapshot is being made, failed or is being
	// deleted: no sandbox can start from it.
	SnapshotNotReady Kind = "snapshot not ready"
	// SnapshotFailed: the snapshot a fork needed could not be made.
	SnapshotFailed Kind = "snapshot failed"
	// ResumeTimeout: the sandbox did not run within the resume bound.
	ResumeTimeout Kind = "resume timeout"
	// VolumeNotFound: a volume a create mounts is not the project's.
	VolumeNotFound Kind = "volume not found"
	// VolumeConflict: the volumes a create mounts cannot be mounted
	// together (they live on different nodes).
	VolumeConflict Kind = "volume conflict"
)

// Error is a request the service refuses: its kind and a message for
// people.
type Error struct {
	Kind    Kind
	Message string
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

func errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
