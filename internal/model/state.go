package model

import (
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/textclip"
)

// SandboxState is a sandbox's lifecycle state.
type SandboxState string

// Lifecycle states (docs/design.md §Lifecycle).
const (
	StatePending    SandboxState = "pending"
	StateCreating   SandboxState = "creating"
	StateRunning    SandboxState = "running"
	StatePausing    SandboxState = "pausing"
	StatePaused     SandboxState = "paused"
	StateResuming   SandboxState = "resuming"
	StateSuspending SandboxState = "suspending"
	StateSuspended  SandboxState = "suspended"
	StateWaking     SandboxState = "waking"
	// StateSnapshotting: a live snapshot of the running sandbox is being
	// taken (POST /v1/sandboxes/{id}/snapshots, a fork); it runs on, and
	// is running again once it is written.
	StateSnapshotting SandboxState = "snapshotting"
	StateDeleting     SandboxState = "deleting"
	StateDeleted      SandboxState = "deleted"
	StateFailed       SandboxState = "failed"
)

// AllSandboxStates lists every state, in lifecycle order.
func AllSandboxStates() []SandboxState {
	return []SandboxState{
		StatePending, StateCreating, StateRunning, StatePausing, StatePaused, StateResuming,
		StateSuspending, StateSuspended, StateWaking, StateSnapshotting, StateDeleting, StateDeleted, StateFailed,
	}
}

// ParseSandboxState parses s as a lifecycle state.
func ParseSandboxState(s string) (SandboxState, error) {
	for _, st := range AllSandboxStates() {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("%w: unknown sandbox state %q", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Terminal reports whether no transition leaves s.
func (s SandboxState) Terminal() bool { return s == StateDeleted }

// ErrInvalidTransition is wrapped by every refused state transition; the API
// maps it to 409.
var ErrInvalidTransition = errors.New("invalid state transition")

// transitions is the lifecycle state machine: the only table of allowed moves.
// Any transition not listed here is refused, with one exception: when a node
// is declared dead, the store (DeclareDeadNodes) moves its unclaimed warm-pool
// sandboxes straight to "deleted" in bulk updates that do not consult this
// table (docs/design.md §Lifecycle). "deleting" is reachable from every state
// except itself and "deleted".
var transitions = map[SandboxState][]SandboxState{
	StatePending:  {StateCreating, StateFailed, StateDeleting},
	StateCreating: {StateRunning, StateFailed, StateDeleting},
	StateRunning:  {StatePausing, StateSuspending, StateSnapshotting, StateFailed, StateDeleting},
	StatePausing:  {StatePaused, StateRunning, StateFailed, StateDeleting},
	// paused → running only when a suspend of a paused sandbox failed
	// before it began (the suspend's failure state).
	StatePaused:     {StateResuming, StateSuspending, StateRunning, StateFailed, StateDeleting},
	StateResuming:   {StateRunning, StatePaused, StateFailed, StateDeleting},
	StateSuspending: {StateSuspended, StateRunning, StateFailed, StateDeleting},
	StateSuspended:  {StateWaking, StateFailed, StateDeleting},
	StateWaking:     {StateRunning, StateSuspended, StateFailed, StateDeleting},
	// A snapshot leaves its sandbox running, whether it succeeds or not.
	StateSnapshotting: {StateRunning, StateFailed, StateDeleting},
	StateFailed:       {StateDeleting},
	StateDeleting:     {StateDeleted},
	StateDeleted:      nil,
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to SandboxState) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// CheckTransition returns nil if from → to is allowed and an error wrapping
// ErrInvalidTransition otherwise.
func CheckTransition(from, to SandboxState) error {
	if CanTransition(from, to) {
		return nil
	}
	return fmt.Errorf("%w: sandbox is %s and cannot become %s", ErrInvalidTransition, from, to)
}
