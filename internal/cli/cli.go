// Package cli implements the `airlock` command line: `airlock server`, which
// runs the server, and the client commands, which talk to a server through
// internal/client.
//
// Exit codes (docs/errors.md): 0 on success; when a command fails (the
// error is printed as "error: <message> (<code>)"), the exit code of the
// error's code in apiv1's error vocabulary, 1 for every code today and for
// errors without one; 2 for usage errors; 130 when interrupted; `exec`,
// `run`, `attach` and `shell` exit with the remote command's own code (see
// exitCodeOf).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// Exit codes other than a remote command's own.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// Env is what one invocation of the CLI sees of the outside world.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string

	// process: the streams and environment are the process's own (Main),
	// so a command may replace the process (`airlock bench` executes
	// airlock-bench in its place).
	process bool
}

// Main runs `airlock` with the process's arguments, environment and standard
// streams and returns its exit code. SIGINT or SIGTERM cancels the running
// command (which then cleans up); a second one kills the process.
func Main() int { return runMain(Run) }

// runMain runs run as the process: its arguments, environment and
// standard streams, its context cancelled by SIGINT or SIGTERM.
func runMain(run func(context.Context, Env, []string) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default handling so that a second
	// one terminates the process even if cleanup hangs.
	unhook := context.AfterFunc(ctx, stop)
	defer unhook()
	env := Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, process: true}
	return run(ctx, env, os.Args[1:])
}

// Run runs the CLI with args (without the program name) and returns the exit
// code. Cancelling ctx interrupts the running command.
func Run(ctx context.Context, env Env, args []string) int {
	return run(ctx, env, args, (*app).rootCommand)
}

// run runs the root command that root makes for one invocation with args
// and returns the exit code.
func run(ctx context.Context, env Env, args []string, root func(*app) *cobra.Command) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = eofReader{}
	}
	a := &app{env: env, interrupted: ctx.Done()}
	r := root(a)
	r.SetArgs(args)
	r.SetIn(env.Stdin)
	r.SetOut(env.Stdout)
	r.SetErr(env.Stderr)
	cmd, err := r.ExecuteContextC(ctx)
	if a.cancel != nil {
		a.cancel()
	}
	return a.exitCode(cmd, err)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// globalFlags are the flags every command accepts.
type globalFlags struct {
	url     string
	apiKey  string
	dataDir string
	output  string
	timeout time.Duration
}

// app is one invocation of the CLI.
type app struct {
	env         Env
	flags       globalFlags
	interrupted <-chan struct{} // closed when the caller's context ends (a signal)
	cancel      context.CancelFunc
	target      client.Target // where the client commands went, once known
}

func (a *app) rootCommand() *cobra.Command {
	root := a.newRoot(&cobra.Command{
		Use:   "airlock",
		Short: "Run untrusted code in isolated sandboxes",
		Long: "Airlock runs untrusted code from AI agents in isolated sandboxes.\n\n" +
			"`airlock server` runs the server; the other commands talk to one, found through\n" +
			"--url/--api-key, $AIRLOCK_URL/$AIRLOCK_API_KEY, or the local server's data dir.",
	})
	root.AddCommand(
		a.serverCommand(),
		a.withLifecycle(a.sandboxCommand()),
		a.snapshotCommand(),
		a.execCommand(),
		a.attachCommand(),
		a.psCommand(),
		a.killCommand(),
		a.runCommand(),
		a.cpCommand(),
		a.fsCommand(),
		a.opCommand(),
		a.templateCommand(),
		a.buildCommand(),
		a.egressCommand(),
		a.secretCommand(),
		a.volumeCommand(),
		a.envCommand(),
		a.poolCommand(),
		a.adminCommand(),
		a.versionCommand(),
	)
	root.AddCommand(a.benchCommand())
	root.AddCommand(a.shellCommand())
	return root
}

// newRoot completes root, the root command of a program, with what every
// program of this CLI has: the global flags checked before every command
// (setup), errors left to exitCode, and help when called without a
// subcommand.
func (a *app) newRoot(root *cobra.Command) *cobra.Command {
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.Args = groupArgs
	root.RunE = groupRun
	root.PersistentPreRunE = a.setup
	root.CompletionOptions.HiddenDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.url, "url", "", "server URL, e.g. http://127.0.0.1:7070 (default: $AIRLOCK_URL, then DATA_DIR/server.url)")
	pf.StringVar(&a.flags.apiKey, "api-key", "", "API key (default: $AIRLOCK_API_KEY, then DATA_DIR/admin.key)")
	pf.StringVar(&a.flags.dataDir, "data-dir", "", "the local server's data dir (default: $AIRLOCK_DATA_DIR, then /var/lib/airlock as root, else ~/.local/share/airlock)")
	pf.StringVarP(&a.flags.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&a.flags.timeout, "timeout", 0, "give up when the command takes longer than this (0: no limit)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// setup runs before every command: it checks the global flags and applies
// --timeout to the command's context.
func (a *app) setup(cmd *cobra.Command, _ []string) error {
	switch a.flags.output {
	case outputTable, outputJSON:
	default:
		return usageErrorf("--output must be table or json, not %q", a.flags.output)
	}
	if a.flags.timeout < 0 {
		return usageErrorf("--timeout must not be negative")
	}
	if a.flags.timeout > 0 {
		ctx, cancel := context.WithTimeout(cmd.Context(), a.flags.timeout)
		a.cancel = cancel
		cmd.SetContext(ctx)
	}
	return nil
}

// client finds the server and returns a client for it.
func (a *app) client() (*client.Client, error) {
	t, err := client.Discover(client.DiscoverOptions{
		URL: a.flags.url, APIKey: a.flags.apiKey, DataDir: a.flags.dataDir, Getenv: a.env.Getenv,
	})
	if err != nil {
		return nil, err
	}
	c, err := client.New(t.URL, t.APIKey, client.WithUserAgent("airlock-cli/"+buildVersion().Version))
	if err != nil {
		return nil, fmt.Errorf("server URL from %s: %w", t.URLFrom, err)
	}
	a.target = t
	return c, nil
}

func (a *app) printer() printer { return printer{w: a.env.Stdout, format: a.flags.output} }

// progressf writes a progress line to stderr.
func (a *app) progressf(format string, args ...any) {
	fmt.Fprintf(a.env.Stderr, format+"\n", args...)
}

// exitStatus ends a command with a given code; whatever had to be said has
// been printed already.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command line the CLI cannot make sense of (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCode prints err (if any) and maps it to the process's exit code.
func (a *app) exitCode(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var st exitStatus
	if errors.As(err, &st) {
		return st.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(a.env.Stderr, "error: %v\n", ue.err)
		if cmd != nil {
			fmt.Fprintf(a.env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	}
	if a.wasInterrupted() && errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.env.Stderr, "error: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(a.env.Stderr, "error: %s\n", a.describe(err))
	return failedExitCode(err)
}

// failedExitCode is the exit code of a command that failed with err: the
// one apiv1's error vocabulary gives the code of an API error or a failed
// operation (ErrorSpec.Exit), exitFailure for an error without a code. The
// exception is exec_failed, which only a command's stream ending with it
// turns into 127 (exitCodeOf): a request refused with it (a command whose
// template's user cannot be resolved, a background start) exits 1, as it
// always did (docs/errors.md).
func failedExitCode(err error) int {
	code := ""
	var ae *client.APIError
	var of *client.OperationFailedError
	switch {
	case errors.As(err, &ae):
		code = ae.Code
	case errors.As(err, &of) && of.Operation.Error != nil:
		code = of.Operation.Error.Code
	}
	if code == "" || code == apiv1.CodeExecFailed {
		return exitFailure
	}
	return apiv1.ExitCode(code)
}

func (a *app) wasInterrupted() bool {
	select {
	case <-a.interrupted:
		return true
	default:
		return false
	}
}

// describe renders err for humans: the error itself (an *APIError ends in
// "(code)"), plus a hint where one helps.
func (a *app) describe(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) && a.flags.timeout > 0:
		msg += fmt.Sprintf(" (--timeout %s reached)", a.flags.timeout)
	case errors.Is(err, syscall.ECONNREFUSED) && a.target.URL != "":
		msg += fmt.Sprintf("\nhint: is `airlock server` running at %s (from %s)?", a.target.URL, a.target.URLFrom)
	case client.IsCode(err, apiv1.CodeUnauthenticated) && a.target.APIKeyFrom != "":
		msg += fmt.Sprintf("\nhint: the API key came from %s", a.target.APIKeyFrom)
	case client.IsCode(err, apiv1.CodeSandboxPaused) || client.IsCode(err, apiv1.CodeSandboxSuspended):
		msg += "\nhint: `airlock sandbox resume` (or `wake`) continues it; `airlock exec --resume` does that first"
	}
	return msg
}

// groupArgs and groupRun make a command that only groups subcommands print
// its help when called alone and fail with a usage error when given an
// unknown subcommand.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{errors.New(msg)}
}

func groupRun(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// group returns a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: groupArgs, RunE: groupRun}
	cmd.AddCommand(subs...)
	return cmd
}
