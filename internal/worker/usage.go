package worker

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Usage reads a hosted sandbox's resource use: the runtime's reading from
// the host, with the guest agent's memory and disk for a VM (whose host
// sees neither, runtime.Usage.Guest). A runtime that cannot read usage
// gives an error wrapping runtime.ErrNotSupported.
func (w *Worker) Usage(ctx context.Context, id model.SandboxID) (runtime.Usage, error) {
	return w.usage(ctx, id, false)
}

// usage is Usage; frozen says the sandbox is paused: a VM's guest, frozen,
// cannot answer, so its reading is refused (ErrNotSupported) rather than
// left waiting.
func (w *Worker) usage(ctx context.Context, id model.SandboxID, frozen bool) (runtime.Usage, error) {
	ur, ok := w.cfg.Runtime.(runtime.UsageReader)
	if !ok {
		return runtime.Usage{}, fmt.Errorf("usage on %s: %w", w.cfg.Runtime.Info().Name, runtime.ErrNotSupported)
	}
	u, err := ur.Usage(ctx, id)
	if err != nil || !u.Guest {
		return u, w.rtErr("usage", err)
	}
	if frozen {
		return runtime.Usage{}, fmt.Errorf("usage of %s: the guest of a paused VM cannot be asked: %w", id, runtime.ErrNotSupported)
	}
	c, err := w.Agent(id)
	if err != nil {
		return u, err
	}
	g, err := c.Usage(ctx)
	if err != nil {
		return u, fmt.Errorf("usage of %s from its agent: %w", id, err)
	}
	u.MemUsed, u.MemCache = max(g.MemTotal-g.MemAvailable, 0), g.MemCache
	u.DiskUsed, u.DiskTotal = g.DiskUsed, g.DiskTotal
	return u, nil
}

// Usage is Worker.Usage of the worker that hosts sb.
func (s *Set) Usage(ctx context.Context, sb model.Sandbox) (runtime.Usage, error) {
	e, err := s.Route(sb)
	if err != nil {
		return runtime.Usage{}, err
	}
	return e.Worker.usage(ctx, sb.ID, sb.State == model.StatePaused)
}
