package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) nodeCommand() *cobra.Command {
	return group("node", "List nodes, and cordon, uncordon or drain one",
		a.nodeListCommand(), a.nodeGetCommand(),
		a.nodeStateCommand("cordon", "Stop placing new sandboxes on a node; its sandboxes run on", (*client.Client).CordonNode),
		a.nodeStateCommand("uncordon", "Place new sandboxes on a cordoned or draining node again", (*client.Client).UncordonNode),
		a.nodeDrainCommand(),
	)
}

func (a *app) nodeListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List nodes with their state, sandboxes, room and last heartbeat",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().nodeList(l)
		},
	}
}

func (a *app) nodeGetCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{Use: "get NODE", Short: "Show a node"},
		"NODE", model.ParseNodeID, (*client.Client).GetNode, printer.node)
}

func (a *app) nodeStateCommand(verb, short string, set func(*client.Client, context.Context, model.NodeID) (apiv1.Node, error)) *cobra.Command {
	return argCommand(a, &cobra.Command{Use: verb + " NODE", Short: short}, "NODE", model.ParseNodeID, set, printer.node)
}

func (a *app) nodeDrainCommand() *cobra.Command {
	var (
		wait     bool
		timeout  time.Duration
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain NODE [--wait [--timeout 10m]]",
		Short: "Stop placing new sandboxes on a node; with --wait, wait until its last sandbox has ended",
		Long: "Drain a node: it takes no new sandboxes, and is drained once its last live sandbox\n" +
			"has ended (the drain neither moves nor deletes sandboxes). With --wait the command\n" +
			"polls the node, printing how many sandboxes are left when that changes, and fails if\n" +
			"some are left after --timeout. `airlock admin node uncordon` ends a drain.",
		Args: exactArgs("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseNodeID, args[0])
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageErrorf("--timeout must not be negative")
			}
			if cmd.Flags().Changed("timeout") && !wait {
				return usageErrorf("--timeout needs --wait")
			}
			if interval <= 0 {
				return usageErrorf("--interval must be positive")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.DrainNode(cmd.Context(), id)
			if err != nil {
				return err
			}
			if wait {
				n, err = a.waitDrained(cmd.Context(), c, n, timeout, interval)
			}
			if perr := a.printer().node(n); perr != nil {
				return perr
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&wait, "wait", false, "wait until the node's last sandbox has ended")
	// This --timeout shadows the global one: same meaning, a default.
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait: give up after this long (0: wait forever)")
	fs.DurationVar(&interval, "interval", 2*time.Second, "with --wait: how often to ask")
	_ = fs.MarkHidden("interval")
	return cmd
}

// waitDrained polls node n until no live sandbox is left on it, printing
// the count whenever it changes. It fails if the node stops draining
// (uncordoned or cordoned meanwhile) or after timeout (0: never). It
// returns the node as last read.
func (a *app) waitDrained(ctx context.Context, c *client.Client, n apiv1.Node, timeout, interval time.Duration) (apiv1.Node, error) {
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	id := model.NodeID(n.ID)
	last := -1
	for {
		if n.Usage.Sandboxes != last {
			last = n.Usage.Sandboxes
			a.progressf("node %s: %d %s left", n.ID, last, plural(last, "sandbox", "sandboxes"))
		}
		if n.Usage.Sandboxes == 0 {
			return n, nil
		}
		if n.State != string(model.NodeDraining) && n.State != string(model.NodeDead) {
			return n, fmt.Errorf("node %s is %s, no longer draining; %d %s left", n.ID, n.State, last, plural(last, "sandbox", "sandboxes"))
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return n, a.drainTimeout(parent, ctx, n, timeout)
		case <-t.C:
		}
		next, err := c.GetNode(ctx, id)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return n, a.drainTimeout(parent, ctx, n, timeout)
			}
			return n, err
		}
		n = next
	}
}

// drainTimeout is the error of a wait that ended with ctx: --timeout, or
// the caller's end (a signal, the global --timeout).
func (a *app) drainTimeout(parent, ctx context.Context, n apiv1.Node, timeout time.Duration) error {
	if parent.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return context.Cause(parent)
	}
	return fmt.Errorf("node %s still has %d %s after --timeout %s", n.ID, n.Usage.Sandboxes,
		plural(n.Usage.Sandboxes, "sandbox", "sandboxes"), timeout)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (p printer) node(n apiv1.Node) error {
	return p.print(n, func(w io.Writer) {
		fmt.Fprintf(w, "ID:\t%s\n", n.ID)
		fmt.Fprintf(w, "Role:\t%s\n", n.Role)
		fmt.Fprintf(w, "State:\t%s\n", nodeStateText(n))
		if n.StateReason != "" {
			fmt.Fprintf(w, "Reason:\t%s\n", oneLine(n.StateReason))
		}
		fmt.Fprintf(w, "URL:\t%s\n", orDash(oneLine(n.AdvertiseURL)))
		fmt.Fprintf(w, "Incarnation:\t%s\n", n.Incarnation)
		fmt.Fprintf(w, "Labels:\t%s\n", orDash(kvList(n.Labels)))
		fmt.Fprintf(w, "Sandboxes:\t%s\n", usedOf(n.Usage.Sandboxes, n.Capacity.Slots, ""))
		fmt.Fprintf(w, "CPUs:\t%d (at most %s per sandbox)\n", n.Usage.CPUs, limitText(n.Capacity.CPUs))
		fmt.Fprintf(w, "Memory:\t%s\n", usedOf(n.Usage.MemoryMiB, n.Capacity.MemoryMiB, " MiB"))
		fmt.Fprintf(w, "Pids:\t%s\n", usedOf(n.Usage.Pids, n.Capacity.Pids, " host tasks"))
		fmt.Fprintf(w, "Can pull:\t%t\n", n.CanPull)
		fmt.Fprintf(w, "Started:\t%s\n", timeText(n.StartedAt))
		fmt.Fprintf(w, "Heartbeat:\t%s (%s ago)\n", timeText(n.HeartbeatAt), ageText(n.HeartbeatAgeMS))
	})
}

func (p printer) nodeList(l apiv1.NodeList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tROLE\tSTATE\tSANDBOXES\tSLOTS\tMEMORY\tPIDS\tHEARTBEAT\tURL")
		for _, n := range l.Nodes {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s ago\t%s\n", n.ID, n.Role, nodeStateText(n), n.Usage.Sandboxes,
				limitText(n.Capacity.Slots), usedOf(n.Usage.MemoryMiB, n.Capacity.MemoryMiB, " MiB"), usedOf(n.Usage.Pids, n.Capacity.Pids, ""),
				ageText(n.HeartbeatAgeMS), orDash(oneLine(n.AdvertiseURL)))
		}
	})
}

// nodeStateText is a node's state, "draining (drained)" once it is.
func nodeStateText(n apiv1.Node) string {
	if n.Drained {
		return n.State + " (drained)"
	}
	return n.State
}

// usedOf renders "used/limit unit"; a limit of 0 bounds nothing ("-").
func usedOf(used, limit int, unit string) string {
	return fmt.Sprintf("%d/%s%s", used, limitText(limit), unit)
}

// limitText renders a capacity; 0 bounds nothing ("-").
func limitText(limit int) string {
	if limit == 0 {
		return "-"
	}
	return strconv.Itoa(limit)
}

// ageText renders a heartbeat age: tenths of a second below 10s, whole
// seconds above.
func ageText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
