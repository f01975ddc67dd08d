package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// snapshotCommand is `airlock snapshot create|list|get|delete`.
func (a *app) snapshotCommand() *cobra.Command {
	return group("snapshot", "Save snapshots of running sandboxes, list and delete them (start sandboxes from one with `sandbox create --snapshot`)",
		a.snapshotCreateCommand(), a.snapshotListCommand(), a.snapshotGetCommand(), a.snapshotDeleteCommand())
}

func (a *app) snapshotCreateCommand() *cobra.Command {
	var (
		noWait bool
		name   string
	)
	cmd := &cobra.Command{
		Use:   "create SANDBOX",
		Short: "Save a snapshot of a running sandbox and wait until it is ready",
		Long: "Save a snapshot of a running sandbox; the sandbox runs on. Its Kind says what\n" +
			"sandboxes made from it get: \"memory\" (its processes continue, runsc) or\n" +
			"\"filesystem\" (its files; processes start again, runc and crun). Start a sandbox\n" +
			"from it with `airlock sandbox create --snapshot SNAPSHOT`.",
		Args: exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var req apiv1.SnapshotRequest
			if name != "" {
				n, err := model.ParseSnapshotName(name)
				if err != nil {
					return usageErrorf("--name: %v", err)
				}
				req.Name = n.String()
			}
			res, err := c.SnapshotSandbox(ctx, id, req)
			if err != nil {
				return err
			}
			if noWait {
				return a.printer().snapshot(res.Snapshot)
			}
			opID, err := model.ParseOperationID(res.Operation.ID)
			if err != nil {
				return fmt.Errorf("server returned a bad operation ID: %w", err)
			}
			snapID, err := model.ParseSnapshotID(res.Snapshot.ID)
			if err != nil {
				return fmt.Errorf("server returned a bad snapshot ID: %w", err)
			}
			start := time.Now()
			a.progressf("snapshot %s of sandbox %s: creating (operation %s)", snapID, id, opID)
			_, waitErr := c.WaitOperation(ctx, opID, client.WithPollWait(2*time.Second))
			var failed *client.OperationFailedError
			if waitErr != nil && !errors.As(waitErr, &failed) {
				return waitErr
			}
			snap, err := c.GetSnapshot(ctx, snapID)
			if err != nil {
				return errors.Join(waitErr, err)
			}
			if err := a.printer().snapshot(snap); err != nil {
				return err
			}
			if waitErr != nil {
				return waitErr
			}
			a.progressf("snapshot %s: %s (%.1fs)", snapID, snap.State, time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the request is accepted")
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot (not unique; list --name finds it)")
	return cmd
}

func (a *app) snapshotListCommand() *cobra.Command {
	var (
		limit  int
		cursor string
		name   string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the project's snapshots",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usageErrorf("--limit must be positive")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if name != "" {
				if _, err := model.ParseSnapshotName(name); err != nil {
					return usageErrorf("--name: %v", err)
				}
			}
			list, err := c.ListSnapshots(cmd.Context(), name, limit, cursor)
			if err != nil {
				return err
			}
			if err := a.printer().snapshotList(list); err != nil {
				return err
			}
			if list.NextCursor != "" && a.flags.output == outputTable {
				a.progressf("more snapshots: add --cursor %s", list.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "page size (default: the server's)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start at this page (a previous list's next cursor)")
	cmd.Flags().StringVar(&name, "name", "", "only snapshots of this name")
	return cmd
}

func (a *app) snapshotGetCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{Use: "get SNAPSHOT", Short: "Show a snapshot"},
		"SNAPSHOT", model.ParseSnapshotID, (*client.Client).GetSnapshot, printer.snapshot)
}

func (a *app) snapshotDeleteCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{
		Use:   "delete SNAPSHOT",
		Short: "Delete a snapshot",
		Long: "Delete a snapshot: it is deleting at once, and its files are removed from its\n" +
			"node once no sandbox is being created from it.",
	}, "SNAPSHOT", model.ParseSnapshotID, (*client.Client).DeleteSnapshot, printer.snapshot)
}

// sandboxForkCommand is `airlock sandbox fork SANDBOX --count N`.
func (a *app) sandboxForkCommand() *cobra.Command {
	var (
		count  int
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "fork SANDBOX",
		Short: "Fork a running sandbox into new ones and wait until they run",
		Long: "Fork a running sandbox: --count new sandboxes (1 to 16) continue from it at the\n" +
			"moment of the fork, each with its own ID, filesystem and network; the source runs\n" +
			"on untouched. On runsc their memory and processes continue too; on runc and crun\n" +
			"only their files do (processes start again): `airlock env list` says which.",
		Args: exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			if err := model.CheckForkCount(count); err != nil {
				return usageErrorf("--count must be between %d and %d", model.MinForkCount, model.MaxForkCount)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			res, err := c.ForkSandbox(ctx, id, apiv1.ForkRequest{Count: count})
			if err != nil {
				return err
			}
			var errs []error
			for i, r := range res.Sandboxes {
				if !noWait {
					r, err = a.waitCreated(ctx, c, r, a.progressf)
					res.Sandboxes[i] = r
					errs = append(errs, err)
				}
			}
			if err := a.printer().forkResult(res); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().IntVar(&count, "count", 1, "how many sandboxes (1 to 16)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the request is accepted; do not wait for the sandboxes to run")
	return cmd
}

func (p printer) snapshot(s apiv1.SavedSnapshot) error {
	return p.print(s, func(w io.Writer) { snapshotRecordFields(w, s) })
}

func snapshotRecordFields(w io.Writer, s apiv1.SavedSnapshot) {
	fmt.Fprintf(w, "ID:\t%s\n", s.ID)
	if s.Name != "" {
		fmt.Fprintf(w, "Name:\t%s\n", s.Name)
	}
	fmt.Fprintf(w, "State:\t%s\n", s.State)
	if s.Error != "" {
		fmt.Fprintf(w, "Error:\t%s\n", oneLine(s.Error))
	}
	fmt.Fprintf(w, "Source:\t%s\n", s.SourceSandboxID)
	if s.Storage != "" && s.State == "ready" {
		where := map[string]string{
			"local":  "on node " + s.NodeID + " only",
			"saving": "on node " + s.NodeID + ", being pushed to the blob store",
			"stored": "in the blob store (any node can start sandboxes from it)",
		}[s.Storage]
		fmt.Fprintf(w, "Storage:\t%s: %s\n", s.Storage, where)
	}
	if s.Kind != "" {
		what := "memory and processes (they continue in sandboxes made from it)"
		if s.Kind == apiv1.SnapshotFilesystem {
			what = "filesystem only (processes start again in sandboxes made from it)"
		}
		fmt.Fprintf(w, "Kind:\t%s: %s\n", s.Kind, what)
	}
	if s.Runtime != "" {
		fmt.Fprintf(w, "Runtime:\t%s\n", s.Runtime)
	}
	fmt.Fprintf(w, "Template:\t%s\n", s.Template)
	fmt.Fprintf(w, "Size:\t%s\n", byteSize(s.SizeBytes))
	fmt.Fprintf(w, "Created:\t%s\n", timeText(s.CreatedAt))
}

func (p printer) snapshotList(l apiv1.SnapshotList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tSTATE\tSOURCE\tKIND\tRUNTIME\tSIZE\tCREATED")
		for _, s := range l.Snapshots {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, orDash(s.Name), s.State, s.SourceSandboxID, orDash(s.Kind), orDash(s.Runtime),
				byteSize(s.SizeBytes), timeText(s.CreatedAt))
		}
	})
}

func (p printer) forkResult(r apiv1.ForkResult) error {
	return p.print(r, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tSTATE\tOPERATION\tFROM SNAPSHOT")
		for _, s := range r.Sandboxes {
			fmt.Fprintf(w, "%s\t%s\t%s (%s)\t%s\n", s.Sandbox.ID, s.Sandbox.State, s.Operation.ID, s.Operation.State, orDash(s.Sandbox.FromSnapshot))
		}
	})
}
