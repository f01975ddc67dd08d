package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/client"
)

// argCommand completes cmd (its Use, Short and Long set) as a command of
// one positional argument, arg: parsed by parse (a usage error when it
// does not parse), sent to the server by call, the answer printed by show.
// It is the shape of the get and delete commands.
func argCommand[T, Out any](a *app, cmd *cobra.Command, arg string, parse func(string) (T, error),
	call func(*client.Client, context.Context, T) (Out, error), show func(printer, Out) error) *cobra.Command {
	cmd.Args = exactArgs(arg)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		v, c, err := parseArgClient(a, parse, args[0])
		if err != nil {
			return err
		}
		out, err := call(c, cmd.Context(), v)
		if err != nil {
			return err
		}
		return show(a.printer(), out)
	}
	return cmd
}

// parseArgClient parses the argument s (a usage error when it does not
// parse), then makes the client: the start of every command about one
// noun.
func parseArgClient[T any](a *app, parse func(string) (T, error), s string) (T, *client.Client, error) {
	v, err := parseArg(parse, s)
	if err != nil {
		return v, nil, err
	}
	c, err := a.client()
	return v, c, err
}
