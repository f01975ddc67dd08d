package benchcli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func createCommand(t cli.Tool) *cobra.Command {
	def := bench.DefaultConfig()
	var pool bool
	cmd := roundsCommand(t, "create",
		"Measure create → first output of echo, for Airlock and the raw runtimes",
		"Measure the time from asking for a new sandbox to the first stdout byte of\n"+
			"`echo hello` in it: for Airlock on each of --runtimes (an in-process airlock server\n"+
			"on a temporary data dir, driven through the API) and, in the same run and on the\n"+
			"same root filesystem, for the raw runtimes of --peers (runc run, crun run, runsc\n"+
			"run, podman run --rootfs). Each round runs every subject once in a random order.\n"+
			"With --pool (default) each server also keeps a warm pool of one sandbox, and\n"+
			"airlock-RUNTIME-pool claims from it (every claim must report source \"pool\"; the\n"+
			"refill is waited for, untimed, after each run).\n"+
			"Prints p50/p95/p99/min/max/mean per subject and Airlock's p50 over its raw peer's.\n"+
			"Needs root. Everything it creates is removed on exit, also on Ctrl-C.",
		def,
		func(ctx context.Context, cfg bench.Config) (report, error) {
			cfg.Pool = pool
			return bench.Run(ctx, cfg)
		})
	cmd.Flags().Lookup("peers").Usage = "raw runs to compare with: runc, crun, runsc, podman (missing ones are skipped)"
	cmd.Flags().BoolVar(&pool, "pool", def.Pool, "also measure a warm-pool claim per runtime (airlock-RUNTIME-pool)")
	return cmd
}
