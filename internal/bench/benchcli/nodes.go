package benchcli

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/cli"
	"github.com/airlockdev/airlock/internal/nodebench"
	"github.com/airlockdev/airlock/internal/pgcluster"
)

func nodesCommand(t cli.Tool) *cobra.Command {
	cfg := nodebench.DefaultConfig()
	var logLevel string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Simulate many nodes on one PostgreSQL: placements and claims per second",
		Long: "Simulate --nodes nodes (one step per count) sharing one PostgreSQL database: each\n" +
			"registers a node record with a fresh incarnation, records an environment and a\n" +
			"template, heartbeats, sweeps for dead nodes and runs the real controller and worker\n" +
			"over a simulated runtime (create and start are instant; the guest agent is an\n" +
			"in-process handler). --clients concurrent clients issue --creates creates per step as\n" +
			"the API does: the real placement, then the real store insert on the chosen node,\n" +
			"placed again elsewhere when the store refuses it. Prints placements and finished\n" +
			"creates per second, create → placed and create → succeeded latencies and how evenly\n" +
			"the sandboxes spread. The simulated nodes share one connection pool and listener;\n" +
			"the driver has its own.\n\n" +
			"Without --database-url it starts a throwaway PostgreSQL 15 cluster (Debian's\n" +
			"postgresql-15 binaries; as the postgres user when run as root) and removes it\n" +
			"afterwards. Each step runs in a schema of its own, dropped afterwards.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := cli.ParseLogLevel(logLevel)
			if err != nil {
				return err
			}
			if err := checkBenchNodes(cfg); err != nil {
				return err
			}
			cfg.Logger = logger(t, level)
			cfg.Progress = t.Stderr()
			ctx := cmd.Context()
			if cfg.DatabaseURL == "" {
				dsn, stop, err := throwawayDatabase(ctx)
				if err != nil {
					return err
				}
				defer stop()
				cfg.DatabaseURL = dsn
				fmt.Fprintln(t.Stderr(), "started a throwaway PostgreSQL cluster")
			}
			rep, err := nodebench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL URL postgres://… to run in (default: a throwaway cluster)")
	fs.IntSliceVar(&cfg.Nodes, "nodes", cfg.Nodes, "node counts, one step each")
	fs.IntVar(&cfg.Creates, "creates", cfg.Creates, "creates per step")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients issuing creates")
	fs.IntVar(&cfg.Projects, "projects", cfg.Projects, "projects the creates are spread over (creates of one project serialize on its quota row)")
	fs.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "operations each node's controller runs at once")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "how often each node heartbeats and sweeps for dead nodes")
	fs.DurationVar(&cfg.PlacementCache, "placement-cache", cfg.PlacementCache, "how long the placer reuses what it read of the nodes (0: read for every create)")
	fs.DurationVar(&cfg.Analyze, "analyze", cfg.Analyze, "how often to ANALYZE the step's tables, as autovacuum would in a long-lived database (0: never)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "how long a step's creates may take to finish")
	fs.StringVar(&logLevel, "log-level", "warn", "level of the simulated nodes' logs on stderr: debug, info, warn or error")
	return cmd
}

func checkBenchNodes(cfg nodebench.Config) error {
	if cfg.DatabaseURL != "" {
		u, err := url.Parse(cfg.DatabaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return cli.UsageErrorf("--database-url must be a postgres:// URL")
		}
	}
	for _, n := range cfg.Nodes {
		if n < 1 {
			return cli.UsageErrorf("--nodes: every count must be at least 1, not %d", n)
		}
	}
	switch {
	case len(cfg.Nodes) == 0:
		return cli.UsageErrorf("--nodes must name at least one count")
	case cfg.Creates < 1:
		return cli.UsageErrorf("--creates must be at least 1")
	case cfg.Clients < 1:
		return cli.UsageErrorf("--clients must be at least 1")
	case cfg.Projects < 1:
		return cli.UsageErrorf("--projects must be at least 1")
	case cfg.Parallel < 1:
		return cli.UsageErrorf("--parallel must be at least 1")
	case cfg.Heartbeat <= 0 || cfg.Timeout <= 0:
		return cli.UsageErrorf("--heartbeat and --timeout must be positive")
	case cfg.PlacementCache < 0 || cfg.Analyze < 0:
		return cli.UsageErrorf("--placement-cache and --analyze must not be negative")
	}
	return nil
}

// throwawayDatabase starts a PostgreSQL cluster, creates a database on it
// and returns its DSN and a function that stops the cluster and removes
// its files.
func throwawayDatabase(ctx context.Context) (string, func(), error) {
	if err := pgcluster.Available(); err != nil {
		return "", nil, fmt.Errorf("%w; or pass --database-url", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := pgcluster.StartCluster(sctx, "")
	if err != nil {
		return "", nil, err
	}
	name, err := c.CreateDatabase(sctx)
	if err != nil {
		_ = c.Stop()
		return "", nil, err
	}
	return c.DSN(name), func() { _ = c.Stop() }, nil
}
