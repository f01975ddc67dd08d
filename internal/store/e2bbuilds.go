package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// E2BBuilds is the store's part of E2B template builds (templates as
// code, internal/e2b/control): their records, so that any server answers
// their status and a restart forgets none.
type E2BBuilds interface {
	// CreateE2BBuild stores a requested build (status waiting); an
	// unknown project is ErrNotFound, an ID in use ErrAlreadyExists.
	CreateE2BBuild(ctx context.Context, b model.E2BBuild) error
	// GetE2BBuild returns a build of the project (another project's is
	// ErrNotFound, as one that does not exist).
	GetE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID) (model.E2BBuild, error)
	// StartE2BBuild moves a waiting build of the project to starting on
	// node, with the uploaded archives it uses, and returns it
	// (ErrNotFound for another project's; ErrStateChanged once started).
	StartE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, node model.NodeID, files []string, now time.Time) (model.E2BBuild, error)
	// SetE2BBuildNative moves a starting build to building with its
	// native build (ErrStateChanged if it is not starting any more).
	SetE2BBuildNative(ctx context.Context, id model.E2BBuildID, native model.BuildID, now time.Time) error
	// ReplaceE2BBuildNative moves a building build from native build from
	// (its first phase: the pull of a fromImage) to native build to
	// (ErrStateChanged if it is not building on from any more: another
	// server or call moved it first, or it ended).
	ReplaceE2BBuildNative(ctx context.Context, id model.E2BBuildID, from, to model.BuildID, now time.Time) error
	// EndE2BBuild moves a build that has not ended to status (ready or
	// error) with reason (ErrStateChanged if it has ended already).
	EndE2BBuild(ctx context.Context, id model.E2BBuildID, status model.E2BBuildStatus, reason string, now time.Time) error
	// FailStartingE2BBuilds ends in error, with reason, every build left
	// starting by node ("" for any node) and last written before before;
	// it returns how many.
	FailStartingE2BBuilds(ctx context.Context, node model.NodeID, before time.Time, reason string, now time.Time) (int, error)
	// PruneE2BBuilds removes the builds last written before before
	// (whatever their status: their native builds and templates stay);
	// it returns how many.
	PruneE2BBuilds(ctx context.Context, before time.Time) (int, error)
}
