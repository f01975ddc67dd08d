package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) poolCommand() *cobra.Command {
	return group("pool", "Warm pools: sandboxes started before anyone asks (admin)", a.poolSetCommand(), a.poolListCommand(), a.poolRmCommand())
}

func (a *app) poolSetCommand() *cobra.Command {
	var (
		req     apiv1.PutPoolRequest
		sizeSet bool
	)
	cmd := &cobra.Command{
		Use:   "set --template NAME --size N [--env NAME] [--cpus N] [--memory-mib N]",
		Short: "Create a warm pool or set its size",
		Long: "Keep --size started, unclaimed sandboxes of the template on each node, for the\n" +
			"newest two releases of its tag. A create whose template, environment, cpus and\n" +
			"memory match (and that names no node selector or disk size) claims one and is\n" +
			"running at once; an empty pool falls back to a cold create. --size 0 drains the\n" +
			"pool but keeps it and its counts. Pools unused for the servers'\n" +
			"--pool-drain-after keep nothing until a create matches them again.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Template == "" {
				return usageErrorf("--template is required")
			}
			if !sizeSet {
				return usageErrorf("--size is required")
			}
			if req.Size < 0 || req.Size > model.MaxPoolSize {
				return usageErrorf("--size must be 0–%d, not %d", model.MaxPoolSize, req.Size)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.PutPool(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.printer().pools([]apiv1.Pool{p}, p)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Template, "template", "", "template name[:tag] (the pool follows the tag) or sha256:… digest")
	fs.IntVar(&req.Size, "size", 0, "ready sandboxes to keep on each node, per release (0: drain)")
	fs.StringVar(&req.Environment, "env", "", "execution environment by name (default: the server's default)")
	fs.IntVar(&req.CPUs, "cpus", 0, "vCPUs of the pool's sandboxes (default 1)")
	fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory of the pool's sandboxes, MiB (default 512)")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) { sizeSet = cmd.Flags().Changed("size") }
	return cmd
}

func (a *app) poolListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List warm pools with their fill and hit/miss counts",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListPools(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().pools(l.Pools, l)
		},
	}
}

func (a *app) poolRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm POOL",
		Short: "Remove a warm pool; its unclaimed sandboxes are deleted, claimed ones are not touched",
		Args:  exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParsePoolID, args[0])
			if err != nil {
				return err
			}
			p, err := c.DeletePool(cmd.Context(), id.String())
			if err != nil {
				return err
			}
			return a.printer().pools([]apiv1.Pool{p}, p)
		},
	}
}

// pools prints pools as a table (one row each), or v as JSON.
func (p printer) pools(pools []apiv1.Pool, v any) error {
	return p.print(v, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tTEMPLATE\tENV\tCPUS\tMEMORY\tSIZE\tREADY\tSTARTING\tHITS\tMISSES\tSTATE")
		for _, pl := range pools {
			state := "active"
			if pl.Drained {
				state = "drained"
			}
			var rel []string
			for _, r := range pl.Releases {
				rel = append(rel, fmt.Sprintf("%s:%d+%d", shortDigest(r.Digest), r.Ready, r.Starting))
			}
			if len(rel) > 1 {
				state += " (" + strings.Join(rel, ", ") + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d MiB\t%d\t%d\t%d\t%d\t%d\t%s\n", pl.ID, pl.Template, orDash(pl.Environment),
				pl.CPUs, pl.MemoryMiB, pl.Size, pl.Ready, pl.Starting, pl.Hits, pl.Misses, state)
		}
	})
}
