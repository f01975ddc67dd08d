package bench

import (
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/server"
)

// pidsServerOptions makes room in the node's pids budget for n sandboxes
// of memMiB in env, pool of them unclaimed in warm pools, as the
// benchmarks raise --max-sandboxes to their counts: a benchmark's
// sandboxes idle or run echo and hold a few host tasks each, far below the
// limits the budget sums, and on a host whose pid_max is low (32768) the
// derived budget would refuse them (docs/security.md, the host's process
// table). A derived budget that is large enough is kept.
func pidsServerOptions(opts *server.Options, env string, memMiB, n, pool int) {
	charge := environment.HostPids(environment.Name(env), model.GuestPids(memMiB))
	if need := n * charge; opts.PidsBudget < need {
		if host, err := server.HostPidsBudget(); opts.PidsBudget != 0 || err != nil || host < need {
			opts.PidsBudget = need
		}
	}
	opts.PoolPids = max(opts.PoolPids, pool*charge)
}
