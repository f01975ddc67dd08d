package benchcli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func densityCommand(t cli.Tool) *cobra.Command {
	var (
		o        bench.DensityOptions
		runsc    int
		agent    string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Measure host memory per idle sandbox, for Airlock and idle raw containers",
		Long: "Per runtime of --runtimes, start an in-process airlock server, create --count\n" +
			"sandboxes (--memory-mib each), let them idle --idle, and report per sandbox: the\n" +
			"host's MemAvailable drop, their memory cgroups' usage and the summed Pss of their\n" +
			"processes (by process name too); then delete them and check that no container,\n" +
			"cgroup or mount is left. With --peers, the same for as many idle detached\n" +
			"`RUNTIME run` containers (sleep) on the same root filesystem. Needs root.\n" +
			"Everything it creates is removed on exit, also on Ctrl-C.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Count < 1 || o.MemoryMiB < 1 || o.Clients < 1 {
				return cli.UsageErrorf("--count, --memory-mib and --clients must be at least 1")
			}
			if runsc < 0 || o.Idle < 0 {
				return cli.UsageErrorf("--runsc-count and --idle must not be negative")
			}
			if runsc > 0 {
				o.Counts = map[string]int{"runsc": runsc}
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
			rep, err := bench.RunDensity(cmd.Context(), o)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&o.Runtimes, "runtimes", []string{"runc", "runsc"}, "runtimes to measure, one after the other: runc, crun, runsc")
	fs.IntVar(&o.Count, "count", 200, "idle sandboxes per runtime")
	fs.IntVar(&runsc, "runsc-count", 0, "idle sandboxes on runsc (0: --count)")
	fs.IntVar(&o.MemoryMiB, "memory-mib", 64, "memory limit of every sandbox (a node holds sandboxes whose limits fit its memory)")
	fs.DurationVar(&o.Idle, "idle", 10*time.Second, "how long the sandboxes idle before they are measured")
	fs.IntVar(&o.Clients, "clients", 4, "concurrent clients making the sandboxes")
	fs.BoolVar(&o.Peers, "peers", true, "also measure as many idle detached raw containers per runtime")
	fs.StringVar(&agent, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&logLevel, "log-level", "warn", "level of the servers' logs on stderr: debug, info, warn or error")
	return cmd
}
