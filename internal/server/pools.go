package server

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pool"
	"github.com/airlockdev/airlock/internal/store"
)

// poolController makes the node's warm-pool controller: its sandboxes get
// the server's default disk, its budget defaults to a quarter of the
// host's memory and four vCPUs per host CPU, its pids budget is the same
// share of the node's as its memory of the node's (poolPids), and a ready
// sandbox is healthy while its guest agent answers.
func (h *host) poolController(st store.Store, node model.NodeID, opts Options, log *slog.Logger) (*pool.Controller, error) {
	mem, cpus := opts.PoolMemoryMiB, opts.PoolCPUs
	if mem <= 0 {
		mem = max(h.capacity.MemoryMiB/4, 1)
	}
	if cpus <= 0 {
		cpus = 4 * max(h.capacity.CPUs, 1)
	}
	disk := opts.DefaultDiskMiB
	if disk <= 0 {
		disk = model.DefaultDiskMiB
	}
	agents := h.agents()
	return pool.New(pool.Config{
		Store: st, Node: node, DiskMiB: disk, MemoryMiB: mem, CPUs: cpus,
		Pids:       cmp.Or(opts.PoolPids, poolPids(h.capacity, mem)),
		DrainAfter: opts.PoolDrainAfter, FillParallel: opts.PoolFillParallel,
		Environment: func(ctx context.Context, name string) (model.EnvironmentRef, error) {
			return h.registry.Resolve(ctx, environment.Selector{Name: environment.Name(name)})
		},
		Healthy: func(ctx context.Context, sb model.Sandbox) error { return agentAnswers(ctx, agents, sb.ID) },
		Logger:  log.With("component", "pool"),
	})
}

// poolPids is the pools' budget of host pids on a node of capacity c whose
// pools may hold poolMemMiB: the share of the node's pids budget that
// poolMemMiB is of its memory (a quarter by default), at most all of it; 0
// (no bound but the node's) when the node has no pids budget.
func poolPids(c model.NodeCapacity, poolMemMiB int) int {
	if c.Pids <= 0 || c.MemoryMiB <= 0 {
		return 0
	}
	share := int64(c.Pids) * int64(poolMemMiB) / int64(c.MemoryMiB)
	return int(min(max(share, 1), int64(c.Pids)))
}

// agentAnswers asks a sandbox's guest agent who it is.
func agentAnswers(ctx context.Context, agents agentguest.Agents, id model.SandboxID) error {
	agent, err := agents.Agent(id)
	if err != nil {
		return err
	}
	_, err = agent.Info(ctx)
	return err
}

// poolComponents run the pool controller until ctx ends.
func poolComponents(pc *pool.Controller) []component {
	if pc == nil {
		return nil
	}
	return []component{loop("pools", func(ctx context.Context) {
		_ = pc.Run(ctx) // logs its failed passes; ends with ctx
	})}
}
