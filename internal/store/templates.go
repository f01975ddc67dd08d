package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// TemplateInUseError refuses a template or tag delete while live sandboxes
// (every state but deleted) use the digest.
type TemplateInUseError struct {
	Digest    model.TemplateDigest
	Sandboxes int               // how many live sandboxes use it
	Examples  []model.SandboxID // up to MaxInUseExamples of them, sorted
}

// MaxInUseExamples bounds TemplateInUseError.Examples.
const MaxInUseExamples = 5

func (e *TemplateInUseError) Error() string {
	ids := make([]string, len(e.Examples))
	for i, id := range e.Examples {
		ids[i] = id.String()
	}
	more := ""
	if e.Sandboxes > len(ids) {
		more = ", …"
	}
	return fmt.Sprintf("template %s is used by %d live sandbox(es) (%s%s)", e.Digest, e.Sandboxes, strings.Join(ids, ", "), more)
}

// TemplateRowState is what the store holds for a digest.
type TemplateRowState int

const (
	TemplateAbsent     TemplateRowState = iota // no row: never recorded
	TemplateLive                               // a row without tombstone
	TemplateTombstoned                         // deleted or collected: its tree may go
)

// Templates is the part of Store that reads and changes templates. Digests
// are immutable; tags move. A deleted template keeps its row (deleted
// sandboxes reference it) with a tombstone that hides it from every read
// here; PutTemplate of the same digest clears it.
//
// Race freedom: CreateSandbox and SetTemplateName hold a share lock on the
// live template row until they commit; DeleteTemplate and TombstoneTemplate
// lock it exclusively and check for users in the same transaction. So no
// sandbox row or tag ever points at a tombstoned template.
type Templates interface {
	// PutTemplate records a template; a no-op if the digest is live, and
	// clears the tombstone (and sets CreatedAt) if it was deleted. t.Names
	// is ignored.
	PutTemplate(ctx context.Context, t model.Template) error
	// SetTemplateName points the tag at digest, creating or moving it.
	// An unknown or deleted digest gives ErrNotFound.
	SetTemplateName(ctx context.Context, name model.TaggedName, digest model.TemplateDigest, now time.Time) error
	GetTemplate(ctx context.Context, digest model.TemplateDigest) (model.Template, error)
	ResolveTemplate(ctx context.Context, ref model.TemplateRef) (model.Template, error)
	ListTemplates(ctx context.Context) ([]model.Template, error)
	// CountTemplateUsers returns how many live sandboxes of scope use each
	// of the digests (every digest in use if none is given); unused ones
	// are absent.
	CountTemplateUsers(ctx context.Context, scope Scope, digests ...model.TemplateDigest) (map[model.TemplateDigest]int, error)
	// DeleteTemplateTag removes the tag and returns the digest it pointed
	// at: ErrNotFound for an unknown tag, *TemplateInUseError while live
	// sandboxes use the digest.
	DeleteTemplateTag(ctx context.Context, name model.TaggedName) (model.TemplateDigest, error)
	// DeleteTemplate tombstones a live template and removes its tags,
	// returning them: ErrNotFound if unknown or already deleted,
	// *TemplateInUseError while live sandboxes use it.
	DeleteTemplate(ctx context.Context, digest model.TemplateDigest, now time.Time) ([]model.TaggedName, error)
	// TemplateGCCandidates lists the live templates that no tag and no live
	// sandbox uses, sorted; with a non-zero createdBefore only those
	// created (or imported again) before it.
	TemplateGCCandidates(ctx context.Context, createdBefore time.Time) ([]model.TemplateDigest, error)
	// TombstoneTemplate tombstones digest if it is live and still unused
	// (no tag, no live sandbox), reporting whether it did.
	TombstoneTemplate(ctx context.Context, digest model.TemplateDigest, now time.Time) (bool, error)
	// TemplateState reports whether digest has no row, a live one or a
	// tombstoned one.
	TemplateState(ctx context.Context, digest model.TemplateDigest) (TemplateRowState, error)
	// TemplateStates is TemplateState for many digests in one read: the
	// map has an entry for each of digests.
	TemplateStates(ctx context.Context, digests []model.TemplateDigest) (map[model.TemplateDigest]TemplateRowState, error)
}
