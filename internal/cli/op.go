package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) opCommand() *cobra.Command {
	return group("op", "Inspect and wait for lifecycle operations",
		a.opGetCommand(), a.opWaitCommand(), a.opListCommand())
}

func (a *app) opGetCommand() *cobra.Command {
	get := func(c *client.Client, ctx context.Context, id model.OperationID) (apiv1.Operation, error) {
		return c.GetOperation(ctx, id, 0)
	}
	return argCommand(a, &cobra.Command{Use: "get OPERATION", Short: "Show an operation"},
		"OPERATION", model.ParseOperationID, get, printer.operation)
}

func (a *app) opWaitCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait OPERATION",
		Short: "Wait until an operation finishes; fail if it failed",
		Args:  exactArgs("OPERATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseOperationID, args[0])
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageErrorf("--timeout must not be negative")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			op, err := c.WaitOperation(ctx, id)
			if errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
				err = fmt.Errorf("operation %s is still %s after --timeout %s", id, op.State, timeout)
			}
			if op.ID != "" {
				if perr := a.printer().operation(op); perr != nil {
					return perr
				}
			}
			return err
		},
	}
	// This --timeout shadows the global one: same meaning, a default.
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long (0: wait forever)")
	return cmd
}
