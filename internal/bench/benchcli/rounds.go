package benchcli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

// roundsFlags are the flags of a benchmark that runs rounds of subjects.
type roundsFlags struct {
	runs        int
	warmup      int
	runtimes    []string
	peers       []string
	agentBinary string
	seed        uint64
	logLevel    string
}

// roundsCommand builds a benchmark that runs rounds of subjects (create,
// exec, throughput, template-size) with its flags --runs, --warmup,
// --runtimes, --peers, --agent-binary, --seed and --log-level; def gives
// their defaults. run gets the checked bench.Config.
func roundsCommand(t cli.Tool, use, short, long string, def bench.Config, run func(context.Context, bench.Config) (report, error)) *cobra.Command {
	f := roundsFlags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.runs < 1 {
				return cli.UsageErrorf("--runs must be at least 1")
			}
			if f.warmup < 0 {
				return cli.UsageErrorf("--warmup must not be negative")
			}
			level, agent, err := prepare(f.logLevel, f.agentBinary)
			if err != nil {
				return err
			}
			logs := logger(t, level)
			rep, err := run(cmd.Context(), bench.Config{
				Runs:         f.runs,
				Warmup:       f.warmup,
				Runtimes:     f.runtimes,
				Peers:        f.peers,
				AgentBinary:  agent,
				TempDir:      def.TempDir,
				Seed:         f.seed,
				Progress:     t.Stderr(),
				ServerLogger: logs,
				Logger:       logs,
				Version:      t.Version(),
			})
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
	fs.StringSliceVar(&f.peers, "peers", def.Peers, "raw runtimes to compare with: runc, crun, runsc (missing ones are skipped)")
	fs.StringVar(&f.agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the per-round order (default: random)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "level of the servers' logs on stderr: debug, info, warn or error")
	return cmd
}

func execCommand(t cli.Tool) *cobra.Command {
	return roundsCommand(t, "exec",
		"Measure the exec round trip of true in a running sandbox, for Airlock and the raw runtimes",
		"Measure the round trip of `true` in an already running sandbox through the API\n"+
			"(POST …/commands, attach over SSE until the exit event: the CLI's path) for Airlock on\n"+
			"each of --runtimes, and in the same run `runc exec` / `crun exec` / `runsc exec` of\n"+
			"true into an equivalent detached raw container (--peers). Each round runs every\n"+
			"subject once in a random order. Prints p50/p95 per subject, Airlock's phases and its\n"+
			"p50 over its raw peer's. Needs root. Everything it creates is removed on exit.",
		bench.DefaultConfig(),
		func(ctx context.Context, cfg bench.Config) (report, error) { return bench.RunExec(ctx, cfg) })
}
