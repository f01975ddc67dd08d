package benchcli

import (
	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func burstCommand(t cli.Tool) *cobra.Command {
	var (
		o        bench.BurstOptions
		agent    string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "burst",
		Short: "Measure creates per second from a full warm pool, its refill, and sustained cold creates",
		Long: "Start an in-process airlock server on --runtime, fill a warm pool of --size\n" +
			"sandboxes (1 CPU, --memory-mib each) and wait until all are ready; fire --size\n" +
			"creates matching it from --clients concurrent clients and time each until its\n" +
			"sandbox runs (creates/s = creates over first request → last running; every\n" +
			"create's source, pool or cold, is counted); time the refill until the pool is full\n" +
			"again; then, with the pool deleted, make cold creates from 1, 2, 4, … (--steps)\n" +
			"concurrent clients until a step's p95 exceeds --degrade × the first step's.\n" +
			"Needs root. Everything it creates is deleted on exit, also on Ctrl-C.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Size < 1 || o.Clients < 1 || o.MemoryMiB < 1 || o.StepCreates < 1 {
				return cli.UsageErrorf("--size, --clients, --memory-mib and --step-creates must be at least 1")
			}
			if o.Degrade <= 1 {
				return cli.UsageErrorf("--degrade must be above 1")
			}
			if o.FillParallel < 0 {
				return cli.UsageErrorf("--fill-parallel must not be negative")
			}
			for _, n := range o.Steps {
				if n < 1 {
					return cli.UsageErrorf("--steps: every client count must be at least 1")
				}
			}
			level, agentPath, err := prepare(logLevel, agent)
			if err != nil {
				return err
			}
			o.AgentBinary = agentPath
			logs := logger(t, level)
			o.Progress, o.ServerLogger, o.Logger = t.Stderr(), logs, logs
			o.TempDir = bench.DefaultConfig().TempDir
			o.Version = t.Version()
			rep, err := bench.RunBurst(cmd.Context(), o)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Runtime, "runtime", "runc", "runtime of the server: runc, crun or runsc")
	fs.IntVar(&o.Size, "size", 200, "warm pool size, and creates in the burst")
	fs.IntVar(&o.Clients, "clients", 20, "concurrent clients of the burst")
	fs.IntVar(&o.MemoryMiB, "memory-mib", 32, "memory limit of every sandbox (a node holds sandboxes whose limits fit its memory: the burst and its refill hold 2 × --size)")
	fs.IntVar(&o.FillParallel, "fill-parallel", 0, "the server's --pool-fill-parallel (0: its default)")
	fs.IntSliceVar(&o.Steps, "steps", []int{1, 2, 4, 8, 16, 32}, "client counts of the sustained cold-create steps")
	fs.Float64Var(&o.Degrade, "degrade", 2, "a step is degraded when its p95 exceeds this × the first step's")
	fs.IntVar(&o.StepCreates, "step-creates", 40, "creates per sustained step (at least 3 per client)")
	fs.BoolVar(&o.NoSustained, "no-sustained", false, "skip the sustained cold-create steps")
	fs.StringVar(&agent, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&logLevel, "log-level", "warn", "level of the server's logs on stderr: debug, info, warn or error")
	return cmd
}
