// Package registry is a node's registry of execution environments: what it
// detected (Detect: each runtime's Info and probe turned into an
// environment.Definition, here and not in internal/environment, which
// imports no runtime and no store, since both import it), which of them
// its operator enabled, recorded in the store, listed for the API, and the
// resolution of a create request's environment (a name or a reference) to
// the reference of one this node may run, with the three separate refusals
// of docs/design.md §Execution environments (unknown, artifacts missing, no
// healthy node).
package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Local is one environment as this node detected it.
type Local struct {
	Detection
	// Binary is the runtime binary's path on this node, which Resolve
	// checks against the definition's digest (needed for enabled
	// environments only).
	Binary string
	// Enabled: the operator enabled it (--env).
	Enabled bool
	// BinaryInfo, if set, is the binary's stat taken before Definition's
	// digest was computed: while the file still has that size, those
	// times and that inode, it is not hashed again.
	BinaryInfo os.FileInfo
}

// Config configures a Registry.
type Config struct {
	Store  store.Store
	NodeID model.NodeID
	// Environments are the ones this node detected; Default (the first
	// --env) must be one of them, enabled and available.
	Environments []Local
	Default      environment.Name
	Now          func() time.Time
}

// Registry answers for the environments of one node. It is safe for
// concurrent use.
type Registry struct {
	cfg Config

	mu           sync.Mutex
	environments []Local
	verified     map[string]fileStamp // binary path → the stamp it last verified with
}

type fileStamp struct {
	digest                environment.Digest
	size, mtime, ctime, i int64
}

// New returns a Registry.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil || cfg.NodeID == "" {
		return nil, errors.New("environment registry: store and node ID are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Registry{cfg: cfg, environments: slices.Clone(cfg.Environments), verified: map[string]fileStamp{}}
	def, ok := r.local(cfg.Default)
	if !ok || !def.Enabled || !def.Available {
		return nil, fmt.Errorf("environment registry: the default environment %q must be enabled and available", cfg.Default)
	}
	return r, nil
}

// Verify checks that the runtime binary of every enabled environment still
// hashes to its definition's digest (errors wrap
// environment.ErrArtifactsMissing), and remembers each file's size, times
// and inode, so that Resolve hashes again only a binary that changed.
func (r *Registry) Verify() error {
	var errs []error
	for _, l := range r.Enabled() {
		if l.Definition != nil {
			errs = append(errs, r.verify(l))
		}
	}
	return errors.Join(errs...)
}

// Default is the environment of a create request that names none.
func (r *Registry) Default() environment.Name { return r.cfg.Default }

// Enabled returns the enabled environments, the default first.
func (r *Registry) Enabled() []Local {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Local
	for _, l := range r.environments {
		if l.Enabled {
			if l.Name == r.cfg.Default {
				out = append([]Local{l}, out...)
			} else {
				out = append(out, l)
			}
		}
	}
	return out
}

func (r *Registry) local(n environment.Name) (Local, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.environments {
		if l.Name == n {
			return l, true
		}
	}
	return Local{}, false
}

// Record stores the definition of every detected environment and replaces
// this node's rows with what it found.
func (r *Registry) Record(ctx context.Context) error {
	r.mu.Lock()
	locals := slices.Clone(r.environments)
	r.mu.Unlock()
	now := r.cfg.Now()
	var rows []store.NodeEnvironment
	for _, l := range locals {
		if l.Definition == nil {
			continue // not installed: nothing to name it by
		}
		c, err := l.Definition.Canonical()
		if err != nil {
			return fmt.Errorf("record environment %s: %w", l.Name, err)
		}
		if _, err := r.cfg.Store.PutEnvironment(ctx, store.EnvironmentRecord{
			Ref: l.Ref, Name: l.Name, SchemaVersion: l.Definition.SchemaVersion, Definition: c, FirstSeen: now,
		}); err != nil {
			return fmt.Errorf("record environment %s: %w", l.Name, err)
		}
		rows = append(rows, store.NodeEnvironment{NodeID: r.cfg.NodeID, Ref: l.Ref, Enabled: l.Enabled, Available: l.Available, Reason: l.Reason, CheckedAt: now})
	}
	if err := r.cfg.Store.SetNodeEnvironments(ctx, r.cfg.NodeID, rows); err != nil {
		return fmt.Errorf("record this node's environments: %w", err)
	}
	return nil
}

// Update replaces what the registry knows of a detected environment that is
// not enabled (a later probe's result) and records it.
func (r *Registry) Update(ctx context.Context, l Local) error {
	if l.Enabled {
		return fmt.Errorf("environment registry: %s: only environments that are not enabled are detected later", l.Name)
	}
	r.mu.Lock()
	i := slices.IndexFunc(r.environments, func(e Local) bool { return e.Name == l.Name })
	switch {
	case i < 0:
		r.environments = append(r.environments, l)
	case r.environments[i].Enabled:
		r.mu.Unlock()
		return fmt.Errorf("environment registry: %s is enabled; its detection is final", l.Name)
	default:
		r.environments[i] = l
	}
	r.mu.Unlock()
	return r.Record(ctx)
}

// Status is one environment as GET /v1/environments lists it.
type Status struct {
	Ref        model.EnvironmentRef
	Definition environment.Definition
	// Enabled and Available are this node's; Reason says why it is not
	// available here.
	Enabled, Available, Default bool
	Reason                      string
	// CheckedAt is when this node last detected it (zero: never).
	CheckedAt time.Time
}

// List returns every environment the store knows and this server can read
// (a definition of a newer schema version, recorded by a newer node, is
// left out), with this node's view of each.
func (r *Registry) List(ctx context.Context) ([]Status, error) {
	recs, err := r.cfg.Store.ListEnvironments(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.cfg.Store.ListNodeEnvironments(ctx, store.NodeEnvironmentQuery{NodeID: r.cfg.NodeID})
	if err != nil {
		return nil, err
	}
	mine := map[model.EnvironmentRef]store.NodeEnvironment{}
	for _, row := range rows {
		mine[row.Ref] = row
	}
	def, _ := r.local(r.cfg.Default)
	out := make([]Status, 0, len(recs))
	for _, rec := range recs {
		d, err := environment.Parse(rec.Definition)
		if err != nil {
			continue
		}
		st := Status{Ref: rec.Ref, Definition: d, Default: rec.Ref == def.Ref}
		if row, ok := mine[rec.Ref]; ok {
			st.Enabled, st.Available, st.Reason, st.CheckedAt = row.Enabled, row.Available, row.Reason, row.CheckedAt
		} else {
			st.Reason = "this node does not have it: its runtime is not installed here or changed since it was recorded"
		}
		out = append(out, st)
	}
	return out, nil
}

// Resolve returns the reference of the environment sel names, if this node
// may run a new sandbox in it: the definition is known (else ErrUnknown),
// this node has its artifacts, the runtime binary still hashing to the
// definition's digest (else ErrArtifactsMissing), and it is enabled here and
// its probe succeeded (else ErrUnavailable). Each error says which.
func (r *Registry) Resolve(ctx context.Context, sel environment.Selector) (model.EnvironmentRef, error) {
	var (
		l  Local
		ok bool
	)
	if sel.Ref != "" {
		rec, err := r.cfg.Store.GetEnvironment(ctx, sel.Ref)
		if errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("%w: no environment has the reference %s", environment.ErrUnknown, sel.Ref)
		}
		if err != nil {
			return "", err
		}
		if _, err := environment.Parse(rec.Definition); err != nil {
			return "", fmt.Errorf("%w: environment %s: %w", environment.ErrUnknown, sel.Ref, err)
		}
		l, ok = r.local(rec.Name)
		if !ok || l.Definition == nil {
			return "", fmt.Errorf("%w: environment %s (%s): its runtime is not installed on this node", environment.ErrArtifactsMissing, sel.Ref.Short(), rec.Name)
		}
		if l.Ref != sel.Ref {
			return "", fmt.Errorf("%w: environment %s (%s): this node's %s is %s now (another binary or version), so the one the reference names is gone", environment.ErrArtifactsMissing, sel.Ref.Short(), rec.Name, rec.Name, l.Ref.Short())
		}
	} else {
		l, ok = r.local(sel.Name)
		if !ok || l.Definition == nil {
			reason := "its runtime is not installed"
			if ok && l.Reason != "" {
				reason = l.Reason
			}
			return "", fmt.Errorf("%w: environment %s: %s", environment.ErrArtifactsMissing, sel.Name, reason)
		}
	}
	if !l.Enabled {
		return "", fmt.Errorf("%w: environment %s is not enabled on this server (enabled: %s); the operator enables it with --env %s", environment.ErrUnavailable, l.Name, r.enabledNames(), l.Name)
	}
	if !l.Available {
		return "", fmt.Errorf("%w: environment %s does not work on this node: %s", environment.ErrUnavailable, l.Name, l.Reason)
	}
	if err := r.verify(l); err != nil {
		return "", err
	}
	return l.Ref, nil
}

func (r *Registry) enabledNames() string {
	var names []string
	for _, l := range r.Enabled() {
		names = append(names, string(l.Name))
	}
	return strings.Join(names, ", ")
}

// verify checks that l's runtime binary still hashes to its definition's
// digest, hashing again only when the file's size, times or inode changed.
func (r *Registry) verify(l Local) error {
	fi, err := os.Stat(l.Binary)
	if err != nil {
		return fmt.Errorf("%w: environment %s: %w", environment.ErrArtifactsMissing, l.Name, err)
	}
	stamp := stampOf(fi, l.Definition.Runtime.BinaryDigest)
	r.mu.Lock()
	seen, ok := r.verified[l.Binary]
	if !ok && l.BinaryInfo != nil && stampOf(l.BinaryInfo, stamp.digest) == stamp {
		seen, ok = stamp, true // hashed for the definition, unchanged since
		r.verified[l.Binary] = stamp
	}
	r.mu.Unlock()
	if ok && seen == stamp {
		return nil
	}
	if err := environment.Verify(*l.Definition, l.Binary); err != nil {
		return err
	}
	r.mu.Lock()
	r.verified[l.Binary] = stamp
	r.mu.Unlock()
	return nil
}

func stampOf(fi os.FileInfo, d environment.Digest) fileStamp {
	stamp := fileStamp{digest: d, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		stamp.ctime, stamp.i = st.Ctim.Nano(), int64(st.Ino)
	}
	return stamp
}
