package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

// EnvironmentRecord is one execution environment's definition as stored:
// its canonical encoding (environment.Definition.Canonical), whose SHA-256
// is Ref.
type EnvironmentRecord struct {
	Ref           model.EnvironmentRef
	Name          environment.Name
	SchemaVersion int
	Definition    []byte
	FirstSeen     time.Time
}

// NodeEnvironment is what one node found out about one environment when it
// last started.
type NodeEnvironment struct {
	NodeID model.NodeID
	Ref    model.EnvironmentRef
	// Enabled: the node's operator enabled the environment (--env).
	Enabled bool
	// Available: its probe ran a sandbox; otherwise Reason says why not.
	Available bool
	Reason    string
	CheckedAt time.Time
}

// NodeEnvironmentQuery selects node environment rows; a zero field matches
// every value.
type NodeEnvironmentQuery struct {
	NodeID model.NodeID
	Ref    model.EnvironmentRef
}

// Environments is the store's part of execution environments: their
// definitions and each node's view of them.
type Environments interface {
	// PutEnvironment records a definition unless its reference is recorded
	// already (a reference names one definition forever; the first
	// FirstSeen stays); created reports which. The reference must be the
	// SHA-256 of Definition and Name and SchemaVersion set, or it is
	// refused with model.ErrInvalid.
	PutEnvironment(ctx context.Context, rec EnvironmentRecord) (created bool, err error)
	// GetEnvironment returns the definition of ref, or ErrNotFound.
	GetEnvironment(ctx context.Context, ref model.EnvironmentRef) (EnvironmentRecord, error)
	// ListEnvironments returns every definition in (name, first_seen, ref)
	// order.
	ListEnvironments(ctx context.Context) ([]EnvironmentRecord, error)
	// SetNodeEnvironments replaces every row of node with rows (each with
	// NodeID node and the Ref of a recorded definition, else ErrNotFound),
	// in one transaction.
	SetNodeEnvironments(ctx context.Context, node model.NodeID, rows []NodeEnvironment) error
	// ListNodeEnvironments returns the rows q selects in (ref, node_id)
	// order.
	ListNodeEnvironments(ctx context.Context, q NodeEnvironmentQuery) ([]NodeEnvironment, error)
}
