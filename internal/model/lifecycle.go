package model

import (
	"fmt"
	"slices"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Step names the worker call an operation runs. The controller maps each
// step to one worker method; a step without a mapping is refused there.
type Step string

// Worker steps.
const (
	// StepEnsure brings the sandbox up in the runtime (idempotent: an
	// interrupted create is resumed).
	StepEnsure Step = "ensure"
	// StepDestroy removes the sandbox and everything it holds from the
	// runtime (idempotent: an absent sandbox is already destroyed).
	StepDestroy Step = "destroy"
	// StepPause freezes the sandbox's processes, memory resident
	// (idempotent: a paused sandbox is left paused).
	StepPause Step = "pause"
	// StepResume continues a paused sandbox (idempotent).
	StepResume Step = "resume"
	// StepSuspend writes the sandbox's snapshot and frees what it holds
	// while running (idempotent: an interrupted suspend is finished; a
	// suspended sandbox reports its snapshot again).
	StepSuspend Step = "suspend"
	// StepWake restores a suspended sandbox from its snapshot and returns
	// once its agent answers (idempotent: a half-restored sandbox is
	// restored again; the snapshot is kept until the sandbox is deleted).
	StepWake Step = "wake"
	// StepSnapshot writes a live snapshot of the running sandbox into the
	// snapshot record of its operation, leaving it running (idempotent: a
	// complete snapshot is reported again, a half-written one made
	// again).
	StepSnapshot Step = "snapshot"
)

// Lifecycle describes one operation kind: which sandbox states a request may
// start from, the state the sandbox is in while the operation runs, where it
// ends when the operation succeeds or fails, and the worker step it runs.
// The lifecycle table (Lifecycles) is the only list of operation kinds: the
// model's validation, the store's kind check, the controller's dispatch and
// its retry path all read it.
type Lifecycle struct {
	Kind OperationKind
	// From lists the states a request of this kind may start from. A request
	// moves the sandbox from one of them to InProgress, either when it is
	// accepted (delete) or when the controller starts it (create).
	From []SandboxState
	// InProgress is the sandbox's state while the operation runs.
	InProgress SandboxState
	// Final is the sandbox's state after the operation succeeded.
	Final SandboxState
	// Failure is the sandbox's state after the operation failed for good.
	// Failure == InProgress: the sandbox stays where it is and the request
	// is queued again until it succeeds (a delete is never abandoned).
	Failure SandboxState
	// Stopped, if set, replaces Failure when the operation failed for good
	// after its step's point of no return, with the sandbox no longer
	// running (the worker says so: worker.ErrStopped, or the runtime has
	// nothing alive for it): a Failure that claims it runs would not be
	// true. Empty: Failure in any case.
	Stopped SandboxState
	// Step is the worker call that does the work.
	Step Step
	// Cleanup, if set, is the worker call that releases what a failed
	// attempt left behind before the sandbox moves to Failure.
	Cleanup Step
}

// lifecycles is the lifecycle table, in the order kinds are listed.
var lifecycles = []Lifecycle{
	{
		Kind:       OpCreate,
		From:       []SandboxState{StatePending},
		InProgress: StateCreating,
		Final:      StateRunning,
		Failure:    StateFailed,
		Step:       StepEnsure,
		Cleanup:    StepDestroy,
	},
	{
		// A failed pause leaves the sandbox running: nothing was frozen.
		Kind:       OpPause,
		From:       []SandboxState{StateRunning},
		InProgress: StatePausing,
		Final:      StatePaused,
		Failure:    StateRunning,
		Step:       StepPause,
	},
	{
		// A failed resume leaves the sandbox paused, to be resumed again.
		Kind:       OpResume,
		From:       []SandboxState{StatePaused},
		InProgress: StateResuming,
		Final:      StateRunning,
		Failure:    StatePaused,
		Step:       StepResume,
	},
	{
		// A suspend that fails before its point of no return leaves the
		// sandbox running: a checkpoint that fails leaves it alive (runsc
		// resumes a paused sandbox before its checkpoint). After it (the
		// checkpoint taken, the container gone) nothing runs: a transient
		// failure is retried like any other (the step finishes what an
		// earlier attempt left), and one that fails for good leaves the
		// sandbox failed, with the suspend's error as its reason.
		Kind:       OpSuspend,
		From:       []SandboxState{StateRunning, StatePaused},
		InProgress: StateSuspending,
		Final:      StateSuspended,
		Failure:    StateRunning,
		Stopped:    StateFailed,
		Step:       StepSuspend,
	},
	{
		// A failed wake leaves the sandbox suspended: its snapshot is kept,
		// and it may be woken again.
		Kind:       OpWake,
		From:       []SandboxState{StateSuspended},
		InProgress: StateWaking,
		Final:      StateRunning,
		Failure:    StateSuspended,
		Step:       StepWake,
	},
	{
		// A live snapshot (a snapshot record's, or a fork's): the
		// sandbox runs on whatever happens; a failed one fails its
		// snapshot record, not the sandbox.
		Kind:       OpSnapshot,
		From:       []SandboxState{StateRunning},
		InProgress: StateSnapshotting,
		Final:      StateRunning,
		Failure:    StateRunning,
		Step:       StepSnapshot,
	},
	{
		Kind: OpDelete,
		From: []SandboxState{
			StatePending, StateCreating, StateRunning, StatePausing, StatePaused, StateResuming,
			StateSuspending, StateSuspended, StateWaking, StateSnapshotting, StateFailed,
		},
		InProgress: StateDeleting,
		Final:      StateDeleted,
		Failure:    StateDeleting,
		Step:       StepDestroy,
	},
}

// Lifecycles returns the lifecycle table: one entry per operation kind.
func Lifecycles() []Lifecycle {
	out := make([]Lifecycle, len(lifecycles))
	for i, l := range lifecycles {
		l.From = slices.Clone(l.From)
		out[i] = l
	}
	return out
}

// AllOperationKinds lists every operation kind, in table order.
func AllOperationKinds() []OperationKind {
	out := make([]OperationKind, len(lifecycles))
	for i, l := range lifecycles {
		out[i] = l.Kind
	}
	return out
}

// LifecycleOf returns the table entry of kind; an unknown kind is an error
// wrapping ErrInvalid.
func LifecycleOf(kind OperationKind) (Lifecycle, error) {
	for _, l := range lifecycles {
		if l.Kind == kind {
			l.From = slices.Clone(l.From)
			return l, nil
		}
	}
	return Lifecycle{}, fmt.Errorf("%w: unknown operation kind %q", ErrInvalid, textclip.Bytes(string(kind), maxEcho))
}

// ParseOperationKind parses s as an operation kind of the lifecycle table.
func ParseOperationKind(s string) (OperationKind, error) {
	l, err := LifecycleOf(OperationKind(s))
	if err != nil {
		return "", err
	}
	return l.Kind, nil
}

// Validate checks the kind against the lifecycle table.
func (k OperationKind) Validate() error {
	_, err := LifecycleOf(k)
	return err
}

// CanStart reports whether a request of this kind may start from a sandbox
// in state s.
func (l Lifecycle) CanStart(s SandboxState) bool { return slices.Contains(l.From, s) }

// CheckStart returns nil if a request of this kind may start from s, and an
// error wrapping ErrInvalidTransition otherwise.
func (l Lifecycle) CheckStart(s SandboxState) error {
	if l.CanStart(s) {
		return nil
	}
	return fmt.Errorf("%w: a %s cannot start from a sandbox that is %s", ErrInvalidTransition, l.Kind, s)
}

// Retried reports whether a failed operation of this kind leaves the
// sandbox in progress for a new request (Failure == InProgress).
func (l Lifecycle) Retried() bool { return l.Failure == l.InProgress }

// check verifies one entry against the state machine: every move it makes
// must be an allowed transition.
func (l Lifecycle) check() error {
	if l.Kind == "" || l.Step == "" || len(l.From) == 0 {
		return fmt.Errorf("lifecycle %q: kind, step and start states are required", l.Kind)
	}
	for _, from := range l.From {
		if from != l.InProgress && !CanTransition(from, l.InProgress) {
			return fmt.Errorf("lifecycle %s: start state %s cannot become %s", l.Kind, from, l.InProgress)
		}
		// An operation may fail before it moved the sandbox on.
		if !l.Retried() && from != l.Failure && !CanTransition(from, l.Failure) {
			return fmt.Errorf("lifecycle %s: start state %s cannot become failure state %s", l.Kind, from, l.Failure)
		}
	}
	if !CanTransition(l.InProgress, l.Final) {
		return fmt.Errorf("lifecycle %s: %s cannot become final state %s", l.Kind, l.InProgress, l.Final)
	}
	if !l.Retried() && !CanTransition(l.InProgress, l.Failure) {
		return fmt.Errorf("lifecycle %s: %s cannot become failure state %s", l.Kind, l.InProgress, l.Failure)
	}
	if l.Stopped != "" && (l.Retried() || !CanTransition(l.InProgress, l.Stopped)) {
		return fmt.Errorf("lifecycle %s: %s cannot become stopped failure state %s", l.Kind, l.InProgress, l.Stopped)
	}
	return nil
}

// CheckLifecycles verifies the whole table: kinds are unique and every move
// an entry makes is allowed by the state machine.
func CheckLifecycles() error {
	seen := make(map[OperationKind]bool, len(lifecycles))
	for _, l := range lifecycles {
		if seen[l.Kind] {
			return fmt.Errorf("lifecycle %s: listed twice", l.Kind)
		}
		seen[l.Kind] = true
		if err := l.check(); err != nil {
			return err
		}
	}
	return nil
}
