package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) opCommand() *cobra.Command {
	return group("op", "Inspect and wait for lifecycle operations",
		a.opGetCommand(), a.opWaitCommand(), a.opListCommand())
}

func (a *app) opGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get OPERATION",
		Short: "Show an operation",
		Args:  exactArgs("OPERATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseOperationID, args[0])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			op, err := c.GetOperation(cmd.Context(), id, 0)
			if err != nil {
				return err
			}
			return a.printer().operation(op)
		},
	}
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
