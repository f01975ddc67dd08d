package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// limitFlag is a quota limit flag: a number (0 admits nothing) or
// "unlimited" ("none"), parsed into a model.Limit once.
type limitFlag struct {
	name  string // wire name, for errors
	limit model.Limit
}

func (f *limitFlag) String() string {
	if m, ok := f.limit.Max(); ok {
		return strconv.FormatInt(m, 10)
	}
	return "unlimited"
}

func (f *limitFlag) Set(s string) error {
	if s == "unlimited" || s == "none" {
		f.limit = model.Unlimited()
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number or \"unlimited\"", s)
	}
	l, err := model.ParseLimit(f.name, &n)
	if err != nil {
		return err
	}
	f.limit = l
	return nil
}

func (f *limitFlag) Type() string { return "N|unlimited" }

func (a *app) projectQuotaCommand() *cobra.Command {
	var (
		clear  bool
		limits = []*limitFlag{{name: "sandboxes"}, {name: "cpus"}, {name: "memory_mib"}, {name: "disk_mib"}}
		flags  = []string{"sandboxes", "cpus", "memory-mib", "disk-mib"}
	)
	cmd := &cobra.Command{
		Use:   "quota PROJECT [--sandboxes N] [--cpus N] [--memory-mib N] [--disk-mib N] | --clear",
		Short: "Show or set a project's quota",
		Long: "Show a project's quota and what its live sandboxes hold (without flags), or\n" +
			"change the limits given as flags, keeping the others (\"unlimited\" removes one);\n" +
			"--clear removes every limit. A sandbox counts in every state but deleted, so a\n" +
			"deleted sandbox frees its share once its delete completes. Creates that would\n" +
			"exceed the quota are refused with 403 quota_exceeded.",
		Args: exactArgs("PROJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseProjectID, args[0])
			if err != nil {
				return err
			}
			changed := false
			for _, name := range flags {
				changed = changed || cmd.Flags().Changed(name)
			}
			if clear && changed {
				return usageErrorf("--clear removes every limit: give it alone")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !clear && !changed {
				q, err := c.GetProjectQuota(ctx, id)
				if err != nil {
					return err
				}
				return a.printer().projectQuota(q)
			}
			var next apiv1.QuotaLimits
			if !clear {
				// Change only the limits given: read the others first.
				cur, err := c.GetProjectQuota(ctx, id)
				if err != nil {
					return err
				}
				next = cur.Limits
				for i, dst := range []**int64{&next.Sandboxes, &next.CPUs, &next.MemoryMiB, &next.DiskMiB} {
					if cmd.Flags().Changed(flags[i]) {
						*dst = limits[i].limit.Ptr()
					}
				}
			}
			q, err := c.SetProjectQuota(ctx, id, next)
			if err != nil {
				return err
			}
			return a.printer().projectQuota(q)
		},
	}
	fs := cmd.Flags()
	fs.Var(limits[0], flags[0], "live sandboxes at most")
	fs.Var(limits[1], flags[1], "vCPUs of the live sandboxes together at most")
	fs.Var(limits[2], flags[2], "memory of the live sandboxes together at most, MiB")
	fs.Var(limits[3], flags[3], "writable layers of the live sandboxes together at most, MiB")
	fs.BoolVar(&clear, "clear", false, "remove every limit")
	return cmd
}

func (p printer) projectQuota(q apiv1.ProjectQuota) error {
	return p.print(q, func(w io.Writer) {
		fmt.Fprintf(w, "Project:\t%s\n", q.ProjectID)
		fmt.Fprintln(w, "LIMIT\tUSED\tQUOTA")
		for _, r := range []struct {
			name  string
			used  int64
			limit *int64
		}{
			{"sandboxes", q.Usage.Sandboxes, q.Limits.Sandboxes},
			{"cpus", q.Usage.CPUs, q.Limits.CPUs},
			{"memory_mib", q.Usage.MemoryMiB, q.Limits.MemoryMiB},
			{"disk_mib", q.Usage.DiskMiB, q.Limits.DiskMiB},
		} {
			limit := "unlimited"
			if r.limit != nil {
				limit = strconv.FormatInt(*r.limit, 10)
			}
			fmt.Fprintf(w, "%s\t%d\t%s\n", r.name, r.used, limit)
		}
	})
}
