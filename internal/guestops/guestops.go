// Package guestops is the one home of what the management API
// (internal/api) and the data plane (internal/dataplane) share about the
// operations on a sandbox's guest: its files (stat, list, mkdir, move,
// remove) and its processes (start, list, status, wait, signal), the
// public errors they end in, the refusal of a sandbox that does not run,
// and what a new command takes from its template (Defaults).
//
// It names no agent client. Guest is implemented over the guest agent by
// internal/guestops/agentguest, which turns the agent's errors into Error
// before they leave it: the guest agent runs inside the sandbox and is not
// trusted, so only the codes mapped there reach clients, and transport
// errors never show host paths. The API reaches guests through this
// package alone and so links no agent client (internal/archtest keeps it
// so); the data plane, which streams bytes to and from the agent, also
// uses agentguest directly.
package guestops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// Guests gives the guest of a sandbox hosted on this node. It fails (with
// an *Error) for a sandbox that is being or has been destroyed (see
// ErrSandboxGone), so that nothing reaches into it again.
type Guests interface {
	Guest(id model.SandboxID) (Guest, error)
}

// Guest is the guest of one running sandbox. Every method is one short
// call bounded by CallTimeout (Process's wait excepted) and fails with an
// *Error, the failure as clients see it. as, where taken, runs a file call
// as that user (nil: as the agent).
type Guest interface {
	// Stat describes path.
	Stat(ctx context.Context, path model.GuestPath, as *model.UserIDs) (apiv1.FileInfo, error)
	// ListDir lists the directory path (the agent bounds the list and
	// says so with Truncated).
	ListDir(ctx context.Context, path model.GuestPath, as *model.UserIDs) (apiv1.FileList, error)
	// Mkdir makes the directory path and its parents (mkdir -p). With
	// owner (as then nil) it runs as the agent and every directory it
	// creates belongs to owner, also where only root may create one.
	Mkdir(ctx context.Context, path model.GuestPath, as, owner *model.UserIDs) (apiv1.FileInfo, error)
	// SetMetadata replaces the metadata of path (a regular file or a
	// directory) with m and describes it.
	SetMetadata(ctx context.Context, path model.GuestPath, m model.FileMetadata, as *model.UserIDs) (apiv1.FileInfo, error)
	// Move renames from to to (replacing to only with overwrite) and
	// describes to.
	Move(ctx context.Context, from, to model.GuestPath, overwrite bool, as *model.UserIDs) (apiv1.FileInfo, error)
	// Remove removes path, a directory with its contents only with
	// recursive.
	Remove(ctx context.Context, path model.GuestPath, recursive bool, as *model.UserIDs) error

	// Start starts cs's process unless the guest has it already (running
	// or exited): starting is idempotent by process ID. hold holds its
	// output back until the first output stream opens; a background
	// start, which nobody may attach to, does not hold.
	Start(ctx context.Context, cs model.CommandSession, hold bool) error
	// Processes lists the running processes and the exited ones the guest
	// still remembers.
	Processes(ctx context.Context) ([]apiv1.Process, error)
	// Process is the state of process pid. With wait > 0 and the process
	// running, it answers as soon as the process has exited, or with its
	// state when wait has passed (an agent too old to wait answers at
	// once).
	Process(ctx context.Context, pid model.ProcessID, wait time.Duration) (apiv1.Process, error)
	// Signal sends sig to process pid and returns its state right after
	// (a process that dies of it is given a moment to be reported so).
	Signal(ctx context.Context, pid model.ProcessID, sig model.Signal) (apiv1.Process, error)
}

// ErrSandboxGone: the sandbox is being destroyed or is gone from this node.
var ErrSandboxGone = errors.New("sandbox is gone from this node")

// ErrEnvironmentNotEnabled: the sandbox runs in an execution environment
// this server does not drive (it was restarted without its --env).
var ErrEnvironmentNotEnabled = errors.New("the sandbox's execution environment is not enabled on this server")

// CallTimeout bounds a single short guest call (start, status, signal,
// resize, list, a file operation) made on behalf of a client request.
const CallTimeout = 30 * time.Second

// Error is a guest or transport failure as clients see it.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// newError is an Error with its code's status (apiv1's error table).
func newError(code, msg string) *Error {
	return &Error{Status: apiv1.HTTPStatus(code), Code: code, Message: msg}
}

// NotRunning is the error of a request that needs a running sandbox made of
// sandbox id in state: paused and suspended sandboxes say how to continue
// (sandbox_paused, sandbox_suspended), any other state is
// sandbox_not_running.
func NotRunning(id model.SandboxID, state model.SandboxState) *Error {
	switch state {
	case model.StatePaused, model.StatePausing:
		return newError(apiv1.CodeSandboxPaused, fmt.Sprintf(
			"sandbox %s is %s; resume it (POST /v1/sandboxes/%s/resume, airlock sandbox resume) or send the command with \"resume\": true", id, state, id))
	case model.StateSuspended, model.StateSuspending:
		return newError(apiv1.CodeSandboxSuspended, fmt.Sprintf(
			"sandbox %s is %s; wake it (POST /v1/sandboxes/%s/wake, airlock sandbox wake) or send the command with \"resume\": true", id, state, id))
	}
	return newError(apiv1.CodeSandboxNotRunning, fmt.Sprintf("sandbox %s is %s, not running", id, state))
}
