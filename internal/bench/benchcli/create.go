package benchcli

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

// createFlags are the flags of `airlock bench create`.
type createFlags struct {
	runs        int
	warmup      int
	runtimes    []string
	peers       []string
	pool        bool
	agentBinary string
	seed        uint64
	logLevel    string
}

func createCommand(t cli.Tool) *cobra.Command {
	def := bench.DefaultConfig()
	f := createFlags{}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Measure create → first output of echo, for Airlock and the raw runtimes",
		Long: "Measure the time from asking for a new sandbox to the first stdout byte of\n" +
			"`echo hello` in it: for Airlock on each of --runtimes (an in-process airlock server\n" +
			"on a temporary data dir, driven through the API) and, in the same run and on the\n" +
			"same root filesystem, for the raw runtimes of --peers (runc run, crun run, runsc\n" +
			"run, podman run --rootfs). Each round runs every subject once in a random order.\n" +
			"With --pool (default) each server also keeps a warm pool of one sandbox, and\n" +
			"airlock-RUNTIME-pool claims from it (every claim must report source \"pool\"; the\n" +
			"refill is waited for, untimed, after each run).\n" +
			"Prints p50/p95/p99/min/max/mean per subject and Airlock's p50 over its raw peer's.\n" +
			"Needs root. Everything it creates is removed on exit, also on Ctrl-C.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.runs < 1 {
				return cli.UsageErrorf("--runs must be at least 1")
			}
			if f.warmup < 0 {
				return cli.UsageErrorf("--warmup must not be negative")
			}
			level, err := cli.ParseLogLevel(f.logLevel)
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return bench.ErrNotRoot
			}
			agent, err := findAgent(f.agentBinary)
			if err != nil {
				return err
			}
			logs := slog.New(slog.NewTextHandler(t.Stderr(), &slog.HandlerOptions{Level: level}))
			cfg := bench.Config{
				Runs:         f.runs,
				Warmup:       f.warmup,
				Runtimes:     f.runtimes,
				Peers:        f.peers,
				Pool:         f.pool,
				AgentBinary:  agent,
				TempDir:      def.TempDir,
				Seed:         f.seed,
				Progress:     t.Stderr(),
				ServerLogger: logs,
				Logger:       logs,
				Version:      t.Version(),
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.runs, "runs", def.Runs, "counted runs per subject")
	fs.IntVar(&f.warmup, "warmup", def.Warmup, "uncounted warm-up runs per subject before them")
	fs.StringSliceVar(&f.runtimes, "runtimes", def.Runtimes, "runtimes to measure Airlock on: runc, crun, runsc")
	fs.StringSliceVar(&f.peers, "peers", def.Peers, "raw runs to compare with: runc, crun, runsc, podman (missing ones are skipped)")
	fs.BoolVar(&f.pool, "pool", def.Pool, "also measure a warm-pool claim per runtime (airlock-RUNTIME-pool)")
	fs.StringVar(&f.agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the per-round order (default: random)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "level of the servers' logs on stderr: debug, info, warn or error")
	return cmd
}
