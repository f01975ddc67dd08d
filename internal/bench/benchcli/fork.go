package benchcli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
	"github.com/airlockdev/airlock/internal/model"
)

func forkCommand(t cli.Tool) *cobra.Command {
	var runtimes []string
	var runs, warmup, count int
	var agentBinary, logLevel string
	cmd := &cobra.Command{
		Use:   "fork",
		Short: "Measure fork → first output of each clone and create from a snapshot → first output, against a cold create",
		Long: "For each --runtime, start an in-process airlock server with one running source sandbox and,\n" +
			"per round (in an order that rotates), time a cold create → first output of echo, a saved\n" +
			"snapshot of the source (→ ready) and a create from it → first output, and a fork of --count\n" +
			"sandboxes → first output of each clone. Prints p50/p95 and the ratios to the cold create.\n" +
			"Needs root. Everything it creates is removed on exit.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 || warmup < 0 {
				return cli.UsageErrorf("--runs must be at least 1 and --warmup not negative")
			}
			if model.CheckForkCount(count) != nil {
				return cli.UsageErrorf("--count must be from %d to %d", model.MinForkCount, model.MaxForkCount)
			}
			level, agent, err := prepare(logLevel, agentBinary)
			if err != nil {
				return err
			}
			opts := bench.ForkOptions{ServerRuns: bench.ServerRuns{Runtimes: runtimes, Runs: runs, Warmup: warmup, AgentBinary: agent, Progress: t.Stderr()}, Count: count}
			if level <= slog.LevelDebug {
				opts.ServerLog = t.Stderr()
			}
			rep, err := bench.RunFork(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&runtimes, "runtime", []string{"runc", "runsc"}, "runtimes to measure (runc, crun, runsc), each with its own server")
	fs.IntVar(&runs, "runs", 10, "counted rounds per runtime")
	fs.IntVar(&warmup, "warmup", 1, "uncounted rounds before them")
	fs.IntVar(&count, "count", 2, "sandboxes per fork (1-16)")
	fs.StringVar(&agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&logLevel, "log-level", "warn", "debug also prints the servers' log on stderr")
	return cmd
}
