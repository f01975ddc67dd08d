package worker

import (
	"context"
	"errors"

	"github.com/airlockdev/airlock/internal/runtime"
)

// rtErr counts err, the result of runtime call op, as a runtime error
// (Config.Metrics) and returns it. A sandbox the runtime does not have, a
// capability it lacks and a cancelled call are answers, not errors.
func (w *Worker) rtErr(op string, err error) error {
	if err == nil || errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotSupported) || errors.Is(err, context.Canceled) {
		return err
	}
	w.cfg.Metrics.RuntimeError(w.cfg.Runtime.Info().Name, op)
	return err
}
