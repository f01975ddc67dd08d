package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) opListCommand() *cobra.Command {
	var (
		states, kinds    []string
		sandbox, project string
		limit            int
		all              bool
		cursor           string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List lifecycle operations, newest first",
		Long: "List the project's operations, newest first, one page at a time (--limit, --cursor)\n" +
			"or all of them (--all). --sandbox, --state and --kind filter (states and kinds match\n" +
			"any); an admin key may name another project with --project.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := client.ListOperationsQuery{Limit: limit, Cursor: cursor}
			var err error
			if q.States, err = parseOpStates(states); err != nil {
				return err
			}
			if q.Kinds, err = parseOpKinds(kinds); err != nil {
				return err
			}
			if sandbox != "" {
				if q.Sandbox, err = model.ParseSandboxID(sandbox); err != nil {
					return usageErrorf("--sandbox: %w", err)
				}
			}
			if project != "" {
				if q.Project, err = model.ParseProjectID(project); err != nil {
					return usageErrorf("--project: %w", err)
				}
			}
			if limit < 0 {
				return usageErrorf("--limit must be positive")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var list apiv1.OperationList
			if all {
				list, err = c.ListAllOperations(cmd.Context(), q)
			} else {
				list, err = c.ListOperations(cmd.Context(), q)
			}
			if err != nil {
				return err
			}
			if err := a.printer().operationList(list); err != nil {
				return err
			}
			if list.NextCursor != "" && a.flags.output == outputTable {
				a.progressf("more operations: add --cursor %s, or --all", list.NextCursor)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&sandbox, "sandbox", "", "only this sandbox's operations")
	fs.StringSliceVar(&states, "state", nil, "only operations in this state: pending, running, succeeded, failed (repeatable or comma-separated)")
	fs.StringSliceVar(&kinds, "kind", nil, "only operations of this kind: create, delete, pause, resume, suspend, wake (repeatable or comma-separated)")
	fs.StringVar(&project, "project", "", "admin: list this project's operations")
	fs.IntVar(&limit, "limit", 0, "page size (default: the server's)")
	fs.StringVar(&cursor, "cursor", "", "start at this page (a previous list's next cursor)")
	fs.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

func parseOpStates(vals []string) ([]model.OperationState, error) {
	var out []model.OperationState
	for _, v := range vals {
		switch st := model.OperationState(strings.TrimSpace(v)); st {
		case model.OpPending, model.OpRunning, model.OpSucceeded, model.OpFailed:
			out = append(out, st)
		default:
			return nil, usageErrorf("--state: %q is not pending, running, succeeded or failed", v)
		}
	}
	return out, nil
}

func parseOpKinds(vals []string) ([]model.OperationKind, error) {
	var out []model.OperationKind
	for _, v := range vals {
		k, err := model.ParseOperationKind(strings.TrimSpace(v))
		if err != nil {
			return nil, usageErrorf("--kind: %w", err)
		}
		out = append(out, k)
	}
	return out, nil
}

func (p printer) operationList(l apiv1.OperationList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tKIND\tSTATE\tSANDBOX\tATTEMPTS\tCREATED\tERROR")
		for _, op := range l.Operations {
			errText := "-"
			if op.Error != nil {
				errText = apiErrorText(*op.Error)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", op.ID, op.Kind, op.State, op.SandboxID,
				op.Attempts, timeText(op.CreatedAt), errText)
		}
	})
}
