package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/server"
)

// Warm pools in the benchmarks.
const (
	// createPoolMemoryMiB is the memory limit of the create benchmark's
	// pool sandboxes. It differs from a default create's 512 MiB so that
	// the cold subject's creates (defaults) never match the pool; a
	// memory limit costs nothing at create time.
	createPoolMemoryMiB = 256
	// poolFillTimeout bounds the wait for a pool to be full.
	poolFillTimeout = 5 * time.Minute
	// poolPoll is how often a pool's fill is read while waiting for it.
	poolPoll = 20 * time.Millisecond
	// benchPoolDrainAfter keeps the benchmark's pools from draining
	// between rounds.
	benchPoolDrainAfter = 24 * time.Hour
)

// Targets of issue 12 for a pool claim → first output (p50).
var poolClaimTargets = map[string]time.Duration{
	"runc":  10 * time.Millisecond,
	"runsc": 20 * time.Millisecond,
}

// poolServerOptions sets the pool options of a benchmark server: no drain
// during the run, and (when memMiB > 0) a budget that holds memMiB of
// unclaimed sandboxes' memory limits and cpus of their CPU limits.
func poolServerOptions(opts *server.Options, memMiB, cpus int) {
	opts.PoolDrainAfter = benchPoolDrainAfter
	if memMiB > 0 {
		opts.PoolMemoryMiB = max(opts.PoolMemoryMiB, memMiB)
	}
	if cpus > 0 {
		opts.PoolCPUs = max(opts.PoolCPUs, cpus)
	}
}

// poolSubject claims a sandbox from a warm pool of its server, runs echo in
// it and deletes it. The pool keeps one sandbox; after every claim the
// subject waits (untimed) until the pool is full again, so that no refill
// runs while another subject is measured and every claim finds a ready
// sandbox.
type poolSubject struct {
	a    *airlockSubject
	req  apiv1.CreateSandboxRequest
	pool apiv1.Pool
	size int
}

// newPoolSubject puts a pool of size sandboxes matching req on a's server
// and waits until it is full.
func newPoolSubject(ctx context.Context, a *airlockSubject, req apiv1.CreateSandboxRequest, size int) (*poolSubject, error) {
	p, err := a.c.PutPool(ctx, apiv1.PutPoolRequest{
		Template: req.Template, Size: size, Environment: req.Environment, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB,
	})
	if err != nil {
		return nil, fmt.Errorf("airlock-%s: put a warm pool: %w", a.flavor, err)
	}
	s := &poolSubject{a: a, req: req, pool: p, size: size}
	if _, err := waitPoolReady(ctx, a.c, p.ID, size, poolFillTimeout); err != nil {
		return s, fmt.Errorf("airlock-%s: %w", a.flavor, err)
	}
	return s, nil
}

func (p *poolSubject) info() Subject {
	s := p.a.info()
	s.Name += "-pool"
	s.Source = apiv1.SourcePool
	s.Method = fmt.Sprintf("Go client against the same in-process airlock server, which keeps a warm pool of %d (template default, %d CPU, %d MiB): "+
		"POST /v1/sandboxes matching it → the sandbox claimed, already running (the response must say source \"pool\", else the run fails) → "+
		"POST …/commands [echo hello] → attach → first stdout event; after each run the pool's refill is waited for, untimed",
		p.size, p.req.CPUs, p.req.MemoryMiB)
	s.Rootfs = "made by the pool before the clock starts (the same overlayfs over the template tree as a cold create); the guest agent is PID 1 and starts echo"
	return s
}

func (p *poolSubject) once(ctx context.Context) (sample, error) {
	smp, err := p.a.createAndEcho(ctx, p.req, apiv1.SourcePool)
	if err != nil {
		return sample{}, err
	}
	if _, err := waitPoolReady(ctx, p.a.c, p.pool.ID, p.size, poolFillTimeout); err != nil {
		return sample{}, fmt.Errorf("after the claim: %w", err)
	}
	return smp, nil
}

// close deletes the pool (its unclaimed sandboxes with it); the server's
// subject, closed after it, deletes whatever is left.
func (p *poolSubject) close(ctx context.Context) error {
	if p.a.stopped {
		return nil
	}
	if _, err := p.a.c.DeletePool(ctx, p.pool.ID); err != nil && !client.IsCode(err, apiv1.CodeNotFound) {
		return fmt.Errorf("airlock-%s: delete the warm pool %s: %w", p.a.flavor, p.pool.ID, err)
	}
	// The pool's sandboxes are deleted in the background (they are in
	// no listed project): wait for them before the server stops. The
	// subject's own sandboxes were deleted by each run.
	return p.a.waitNoContainers(ctx, time.Minute)
}

// errPoolNotFound is returned while waiting for a pool that is gone.
var errPoolNotFound = errors.New("the warm pool is gone")

// findPool returns the pool id from the server's list.
func findPool(ctx context.Context, c *client.Client, id string) (apiv1.Pool, error) {
	list, err := c.ListPools(ctx)
	if err != nil {
		return apiv1.Pool{}, fmt.Errorf("list warm pools: %w", err)
	}
	for _, p := range list.Pools {
		if p.ID == id {
			return p, nil
		}
	}
	return apiv1.Pool{}, fmt.Errorf("%w: %s", errPoolNotFound, id)
}

// waitPoolReady polls the pool until at least ready sandboxes are ready,
// and returns it then.
func waitPoolReady(ctx context.Context, c *client.Client, id string, ready int, timeout time.Duration) (apiv1.Pool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		last    apiv1.Pool
		lastErr error
	)
	for {
		p, err := findPool(ctx, c, id)
		switch {
		case err == nil && p.Ready >= ready:
			return p, nil
		case errors.Is(err, errPoolNotFound):
			return apiv1.Pool{}, err
		case err == nil:
			last = p
		default:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return last, errors.Join(fmt.Errorf("warm pool %s: %d of %d ready (%d starting) after %s: %w",
				id, last.Ready, ready, last.Starting, timeout, context.Cause(ctx)), lastErr)
		case <-time.After(poolPoll):
		}
	}
}

// poolTarget is the target for a pool subject's runtime, if any.
func poolTarget(s Subject) (Target, bool) {
	want, ok := poolClaimTargets[s.Runtime]
	if !ok || s.FirstOutput.N == 0 {
		return Target{}, false
	}
	return Target{
		Name: s.Name + " claim → first output p50",
		Want: "≤ " + formatDuration(want),
		Got:  formatDuration(s.FirstOutput.P50),
		Met:  s.FirstOutput.P50 <= want,
	}, true
}

// Target is one target of the issue and whether the run met it.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// poolCreateRequest is the create the pool subject of a server makes (and
// its pool matches).
func poolCreateRequest(a *airlockSubject) apiv1.CreateSandboxRequest {
	return apiv1.CreateSandboxRequest{
		Template:    model.DefaultTemplate.String(),
		Environment: string(a.flavor),
		CPUs:        1,
		MemoryMiB:   createPoolMemoryMiB,
	}
}
