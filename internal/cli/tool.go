package cli

import (
	"context"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/client"
)

// Tool is what the commands of a program other than airlock that keeps
// airlock's command-line conventions see of their invocation; airlock-bench
// (internal/bench/benchcli) is one. Such a program has airlock's global
// flags --output, --data-dir and --timeout (and, hidden, --url and
// --api-key), and exits as airlock does: 0; 1 on a failure ("error: …" on
// stderr); 2 on a usage error (see UsageErrorf); 130 when interrupted.
type Tool struct{ a *app }

// Stdout and Stderr are the invocation's output streams.
func (t Tool) Stdout() io.Writer { return t.a.env.Stdout }
func (t Tool) Stderr() io.Writer { return t.a.env.Stderr }

// JSON reports whether --output asks for JSON rather than a table.
func (t Tool) JSON() bool { return t.a.flags.output == outputJSON }

// DataDir is the local server's data dir: --data-dir, then
// $AIRLOCK_DATA_DIR, then the default.
func (t Tool) DataDir() (string, error) {
	return client.ResolveDataDir(t.a.flags.dataDir, t.a.env.Getenv)
}

// Version is the running binary's version ("(devel)" when unknown).
func (t Tool) Version() string { return buildVersion().Version }

// RunTool runs a tool: root (its name and help) completed with the global
// flags and the commands that commands makes for this invocation, with
// args (without the program name); it returns the exit code. Cancelling
// ctx interrupts the running command.
func RunTool(ctx context.Context, env Env, root *cobra.Command, commands func(Tool) []*cobra.Command, args []string) int {
	return run(ctx, env, args, func(a *app) *cobra.Command {
		r := a.newRoot(root)
		// A tool talks to no server: --url and --api-key are accepted
		// (`airlock --url … bench …` passes them on), unused and unlisted.
		_ = r.PersistentFlags().MarkHidden("url")
		_ = r.PersistentFlags().MarkHidden("api-key")
		r.AddCommand(commands(Tool{a})...)
		return r
	})
}

// MainTool runs a tool as the process (its arguments, environment and
// standard streams; SIGINT or SIGTERM cancels the running command, a
// second one kills the process) and returns the exit code.
func MainTool(root *cobra.Command, commands func(Tool) []*cobra.Command) int {
	return runMain(func(ctx context.Context, env Env, args []string) int {
		return RunTool(ctx, env, root, commands, args)
	})
}

// UsageErrorf is a command line the tool cannot make sense of: printed
// with a pointer to --help, exit 2.
func UsageErrorf(format string, args ...any) error { return usageErrorf(format, args...) }

// ExactArgs accepts exactly the named positional arguments (a usage error
// otherwise).
func ExactArgs(names ...string) cobra.PositionalArgs { return exactArgs(names...) }

// ParseLogLevel parses a --log-level flag: debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) { return parseLogLevel(s) }
