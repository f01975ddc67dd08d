package benchcli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func lifecycleCommand(t cli.Tool) *cobra.Command {
	var runtimes []string
	var runs, warmup int
	var agentBinary, logLevel string
	cmd := &cobra.Command{
		Use:   "lifecycle",
		Short: "Measure pause, resume, suspend and wake, and wake → first output against a cold create",
		Long: "For each --runtime, start an in-process airlock server and, per round, take one sandbox\n" +
			"through pause, resume, suspend and wake (each timed from the request to the operation's\n" +
			"success, as a client sees it), then time a new command's first output after the wake\n" +
			"against a cold create's first output in the same round. Prints p50/p95 per step and the\n" +
			"issue's targets (runc pause and resume at most 10 ms, runsc wake at most 150 ms). Needs\n" +
			"root. Everything it creates is removed on exit.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 || warmup < 0 {
				return cli.UsageErrorf("--runs must be at least 1 and --warmup not negative")
			}
			level, agent, err := prepare(logLevel, agentBinary)
			if err != nil {
				return err
			}
			opts := bench.LifecycleOptions{ServerRuns: bench.ServerRuns{Runtimes: runtimes, Runs: runs, Warmup: warmup, AgentBinary: agent, Progress: t.Stderr()}}
			if level <= slog.LevelDebug {
				opts.ServerLog = t.Stderr()
			}
			rep, err := bench.RunLifecycle(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&runtimes, "runtime", []string{"runc", "runsc"}, "runtimes to measure (runc, crun, runsc), each with its own server")
	fs.IntVar(&runs, "runs", 20, "counted rounds per runtime")
	fs.IntVar(&warmup, "warmup", 2, "uncounted rounds before them")
	fs.StringVar(&agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&logLevel, "log-level", "warn", "debug also prints the servers' log on stderr")
	return cmd
}
