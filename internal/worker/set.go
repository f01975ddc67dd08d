package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// ErrNotDriven: the sandbox belongs to an execution environment this server
// does not drive (it was restarted with another set of --env); it is left
// alone. It wraps ErrPermanent and guestops.ErrEnvironmentNotEnabled.
var ErrNotDriven = fmt.Errorf("%w: %w", ErrPermanent, guestops.ErrEnvironmentNotEnabled)

// Environment is one enabled execution environment and the worker that
// runs its sandboxes (not to be confused with a sandbox's environment
// variables, model.Env).
type Environment struct {
	Name   environment.Name
	Ref    model.EnvironmentRef
	Worker *Worker
}

// lookupTimeout bounds the store lookup of an agent request's sandbox.
const lookupTimeout = 10 * time.Second

// Set routes each sandbox to the worker of its execution environment. The
// first environment is the default (for sandboxes stored before
// environments existed). It is safe for concurrent use.
type Set struct {
	environments []Environment
	lookup       func(context.Context, model.SandboxID) (model.Sandbox, error)

	mu     sync.Mutex
	routes map[model.SandboxID]environment.Name // sandboxes routed before, for Agent
}

// NewSet returns the Set of environments (the default first). lookup reads
// a sandbox's record (store.GetSandboxByID), for Agent calls about a
// sandbox not routed yet.
func NewSet(environments []Environment, lookup func(context.Context, model.SandboxID) (model.Sandbox, error)) (*Set, error) {
	if len(environments) == 0 || lookup == nil {
		return nil, errors.New("worker set: at least one environment and a lookup are required")
	}
	seen := map[environment.Name]bool{}
	for _, e := range environments {
		if e.Worker == nil || e.Ref == "" || seen[e.Name] {
			return nil, fmt.Errorf("worker set: environment %q: a worker, a reference and a name of its own are required", e.Name)
		}
		if got := e.Worker.RuntimeInfo().Name; got != string(e.Name) {
			return nil, fmt.Errorf("worker set: environment %s is driven by runtime %s", e.Name, got)
		}
		seen[e.Name] = true
	}
	return &Set{environments: environments, lookup: lookup, routes: map[model.SandboxID]environment.Name{}}, nil
}

// Environments returns the environments, the default first.
func (s *Set) Environments() []Environment { return s.environments }

// Default is the default environment.
func (s *Set) Default() Environment { return s.environments[0] }

func (s *Set) byName(n environment.Name) (Environment, bool) {
	for _, e := range s.environments {
		if e.Name == n {
			return e, true
		}
	}
	return Environment{}, false
}

func (s *Set) names() string {
	names := make([]string, 0, len(s.environments))
	for _, e := range s.environments {
		names = append(names, string(e.Name))
	}
	return strings.Join(names, ", ")
}

// Route returns the environment whose worker acts on sb:
//   - a placed sandbox (sb.Runtime set) stays with the runtime that hosts
//     it, whatever its reference (the binary may have been upgraded since;
//     the sandbox is still managed and deleted by it);
//   - an unplaced one goes to the environment its reference names, which
//     must be exactly one enabled here (a create never silently runs in
//     another environment than the one the request resolved);
//   - one with neither (stored before environments existed) to the default.
//
// A sandbox of an environment that is not enabled here gets an error
// wrapping ErrNotDriven that says how to restart the server to manage it.
func (s *Set) Route(sb model.Sandbox) (Environment, error) {
	var (
		e  Environment
		ok bool
	)
	switch {
	case sb.Runtime != "":
		// The stored runtime name, parsed here where it enters routing.
		if n, err := environment.ParseName(sb.Runtime); err == nil {
			e, ok = s.byName(n)
		}
		if !ok {
			return Environment{}, fmt.Errorf("%w: sandbox %s runs on runtime %s but this server drives %s; restart the server with --env %s to manage it", ErrNotDriven, sb.ID, sb.Runtime, s.names(), sb.Runtime)
		}
	case sb.Environment != "":
		for _, c := range s.environments {
			if c.Ref == sb.Environment {
				e, ok = c, true
			}
		}
		if !ok {
			return Environment{}, fmt.Errorf("%w: sandbox %s is to run in environment %s, which this server does not drive (it drives %s, or their runtime binaries changed since the sandbox was requested)", ErrNotDriven, sb.ID, sb.Environment.Short(), s.names())
		}
	default:
		e = s.Default()
	}
	s.mu.Lock()
	s.routes[sb.ID] = e.Name
	s.mu.Unlock()
	return e, nil
}

// Agent returns the guest-agent client of a sandbox hosted here, from the
// worker of its environment (agentguest.Agents).
func (s *Set) Agent(id model.SandboxID) (*agentclient.Client, error) {
	s.mu.Lock()
	name, ok := s.routes[id]
	s.mu.Unlock()
	if ok {
		e, _ := s.byName(name)
		return e.Worker.Agent(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	sb, err := s.lookup(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	e, err := s.Route(sb)
	if err != nil {
		return nil, err
	}
	return e.Worker.Agent(id)
}

// Forget drops a destroyed sandbox's route.
func (s *Set) Forget(id model.SandboxID) {
	s.mu.Lock()
	delete(s.routes, id)
	s.mu.Unlock()
}

// Close closes every worker's agent connections. Sandboxes keep running.
func (s *Set) Close() error {
	var errs []error
	for _, e := range s.environments {
		errs = append(errs, e.Worker.Close())
	}
	return errors.Join(errs...)
}
