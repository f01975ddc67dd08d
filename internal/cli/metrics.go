package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// sandboxMetricsCommand is `airlock sandbox metrics ID [--since D | --start T] [--end T]`.
func (a *app) sandboxMetricsCommand() *cobra.Command {
	var (
		since      time.Duration
		start, end string
	)
	cmd := &cobra.Command{
		Use:   "metrics SANDBOX",
		Short: "Show a sandbox's CPU, memory and disk use over time",
		Long: "Show the samples of the sandbox's resource use that its node takes every 5 s while\n" +
			"it runs or is paused (kept for its last 6 hours, removed with it), oldest first.\n" +
			"--since 10m shows the last ten minutes; --start and --end take RFC 3339 times.",
		Args: exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			var from, to time.Time
			if start != "" && since != 0 {
				return usageErrorf("--since and --start exclude each other")
			}
			if since < 0 {
				return usageErrorf("--since must not be negative")
			}
			if since > 0 {
				from = time.Now().Add(-since)
			}
			for _, f := range []struct {
				name, v string
				dst     *time.Time
			}{{"start", start, &from}, {"end", end, &to}} {
				if f.v == "" {
					continue
				}
				if *f.dst, err = time.Parse(time.RFC3339Nano, f.v); err != nil {
					return usageErrorf("--%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not %q", f.name, f.v)
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.SandboxMetrics(cmd.Context(), id, from, to)
			if err != nil {
				return err
			}
			return a.printer().metricList(list)
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only samples of this last period, e.g. 10m")
	cmd.Flags().StringVar(&start, "start", "", "only samples at or after this RFC 3339 time")
	cmd.Flags().StringVar(&end, "end", "", "only samples at or before this RFC 3339 time")
	return cmd
}

func (p printer) metricList(l apiv1.SandboxMetricList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "TIME\tCPU\tMEMORY\tCACHE\tDISK")
		for _, m := range l.Metrics {
			fmt.Fprintf(w, "%s\t%.1f%% of %d\t%s / %s\t%s\t%s / %s\n", m.At.Local().Format("15:04:05"), m.CPUUsedPct, m.CPUCount,
				mib(m.MemUsed), mib(m.MemTotal), mib(m.MemCache), mib(m.DiskUsed), mib(m.DiskTotal))
		}
	})
}

// mib is a byte count in MiB, one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
