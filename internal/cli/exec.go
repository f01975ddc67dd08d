package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// Exit codes of exec and run besides the command's own and those of
// apiv1's error vocabulary (127: exec_failed, the command could not be
// executed, as in a shell).
const (
	exitOutputLost = 125 // the command succeeded but some of its output was lost
	exitUnknownEnd = 255 // the command ended in a way no exit code describes
)

// commandFlags are the process flags of exec and run.
type commandFlags struct {
	env         []string
	cwd         string
	user        string
	timeout     time.Duration
	interactive bool // -i: forward our stdin
	resume      bool // --resume: resume (wake) a paused (suspended) sandbox first
}

func (f *commandFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of the command (repeatable)")
	fs.StringVar(&f.cwd, "cwd", "", "working directory inside the sandbox (default /)")
	fs.StringVarP(&f.user, "user", "u", "", "run as UID[:GID] inside the sandbox (default root)")
	fs.DurationVar(&f.timeout, "command-timeout", 0, "kill the command this long after it starts (0: never)")
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "forward our stdin to the command (end of input closes its stdin)")
}

// request builds the command request for args.
func (f *commandFlags) request(args []string) (apiv1.CreateCommandRequest, error) {
	req := apiv1.CreateCommandRequest{Args: args, Stdin: f.interactive, Resume: f.resume}
	var err error
	if req.Env, err = parseEnvFlag(f.env); err != nil {
		return req, err
	}
	if f.cwd != "" {
		p, err := model.ParseGuestPath(f.cwd)
		if err != nil {
			return req, usageErrorf("--cwd: %w", err)
		}
		req.Cwd = p.String()
	}
	if f.user != "" {
		u, err := parseUserFlag(f.user)
		if err != nil {
			return req, err
		}
		req.User = &u
	}
	if f.timeout < 0 || f.timeout%time.Second != 0 {
		return req, usageErrorf("--command-timeout must be a whole number of seconds, such as 30s or 5m")
	}
	req.TimeoutSecs = int(f.timeout / time.Second)
	return req, nil
}

// parseUserFlag parses UID[:GID] (GID defaults to UID).
func parseUserFlag(s string) (apiv1.User, error) {
	us, gs, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return apiv1.User{}, usageErrorf("--user %q: want a numeric UID[:GID]", s)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.ParseInt(gs, 10, 64); err != nil {
			return apiv1.User{}, usageErrorf("--user %q: want a numeric UID[:GID]", s)
		}
	}
	if _, err := model.ParseUserIDs(uid, gid); err != nil {
		return apiv1.User{}, usageErrorf("--user: %w", err)
	}
	return apiv1.User{UID: uid, GID: gid}, nil
}

func (a *app) execCommand() *cobra.Command {
	var (
		f      commandFlags
		detach bool
		tty    bool
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] SANDBOX [-- COMMAND [ARG...]]",
		Short: "Run a command in a sandbox and stream its output",
		Long: "Run a command in a running sandbox. Its stdout and stderr are streamed to ours\n" +
			"as they arrive, and airlock exits with the command's exit code (128+N if signal\n" +
			"N killed it; 127 if it could not be started; 125 if it succeeded but some of\n" +
			"its output was lost, which is reported on stderr). -i forwards our stdin; -t\n" +
			"runs it on a terminal attached to ours over a WebSocket (as airlock shell, with\n" +
			"stdin); -d starts it in the background and prints its process ID (see attach,\n" +
			"ps, kill). Flags go before SANDBOX. Without a COMMAND, the template's default\n" +
			"command runs (an OCI image's entrypoint and cmd).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("missing SANDBOX")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			req, err := f.request(optionalCommandArgs(cmd, args[1:]))
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if tty {
				if detach {
					return usageErrorf("-d and -t cannot be combined")
				}
				code, err := a.shell(cmd.Context(), c, id, req)
				if err != nil {
					return err
				}
				return exitStatus{code}
			}
			if detach {
				if f.interactive {
					return usageErrorf("-d and -i cannot be combined: a background command has nobody to read stdin from")
				}
				req.Background = true
				cs, err := c.CreateCommand(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.env.Stdout, cs.ProcessID)
				return nil
			}
			code, err := a.execute(cmd.Context(), c, id, req)
			if err != nil {
				return err
			}
			return exitStatus{code}
		},
	}
	cmd.Flags().SetInterspersed(false)
	f.register(cmd.Flags())
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "start the command in the background and print its process ID")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal attached to ours (forwards stdin too)")
	cmd.Flags().BoolVar(&f.resume, "resume", false, "resume a paused (or wake a suspended) sandbox first and wait until it runs")
	return cmd
}

// execute runs one command in a sandbox, copies its output to our stdout and
// stderr, and returns the exit code airlock should end with. An error means
// the command's outcome is unknown.
func (a *app) execute(ctx context.Context, c *client.Client, sandbox model.SandboxID, req apiv1.CreateCommandRequest) (int, error) {
	cs, err := c.CreateCommand(ctx, sandbox, req)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if req.Stdin {
		dp, err := c.DataPlane(cs.AttachURL, cs.AttachmentToken)
		if err != nil {
			return 0, err
		}
		// Owned by this call: cancel ends the request. A read of a
		// terminal blocked in Read ends with the process.
		go func() {
			if err := dp.Stdin(ctx, a.env.Stdin, true); err != nil && ctx.Err() == nil {
				fmt.Fprintf(a.env.Stderr, "airlock: forwarding stdin: %v\n", err)
			}
		}()
	}
	return a.follow(ctx, c, cs.AttachURL, cs.AttachmentToken, "")
}

// follow attaches to a command's output (after lastEventID, if set), copies
// it to our stdout and stderr and returns the exit code airlock should end
// with. Lost output is reported on stderr and turns success into
// exitOutputLost.
func (a *app) follow(ctx context.Context, c *client.Client, attachURL, token, lastEventID string) (int, error) {
	s, err := c.AttachAfter(ctx, attachURL, token, lastEventID)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	return a.copyEvents(s.Next, "\n")
}

// copyEvents copies a command's events (from an SSE stream or a WebSocket)
// to our stdout and stderr until its end, and returns the exit code airlock
// should end with. Messages end with eol ("\r\n" on a raw terminal). Lost
// output is reported and turns success into exitOutputLost.
func (a *app) copyEvents(next func() (client.Event, error), eol string) (int, error) {
	lost := false
	for {
		ev, err := next()
		if errors.Is(err, io.EOF) {
			return 0, errors.New("the output stream ended without the command's exit")
		}
		if err != nil {
			return 0, err
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			if _, err := a.env.Stdout.Write(ev.Data); err != nil {
				return 0, fmt.Errorf("writing the command's stdout: %w", err)
			}
		case apiv1.EventStderr:
			if _, err := a.env.Stderr.Write(ev.Data); err != nil {
				return 0, fmt.Errorf("writing the command's stderr: %w", err)
			}
		case apiv1.EventGap:
			lost = true
			fmt.Fprint(a.env.Stderr, eol, gapMessage(ev.Gap), eol)
		case apiv1.EventError, apiv1.EventExit:
			if ev.Kind == apiv1.EventError && ev.Request != "" {
				continue // one WebSocket message failed (e.g. stdin after the process stopped reading); the session goes on
			}
			if msg := endMessage(ev); msg != "" {
				fmt.Fprint(a.env.Stderr, msg, eol)
			}
			code := exitCodeOf(ev)
			if lost && code == 0 {
				code = exitOutputLost
			}
			return code, nil
		}
	}
}

// gapMessage says on stderr what output was lost.
func gapMessage(g *apiv1.GapEventData) string {
	if g == nil {
		return "airlock: some output of the command was lost"
	}
	bound := ""
	if !g.Exact {
		bound = "at least "
	}
	return fmt.Sprintf("airlock: output lost: %s%d bytes of stdout and %s%d bytes of stderr (%d events) were dropped while nobody was reading",
		bound, g.StdoutBytes, bound, g.StderrBytes, g.Events)
}

// exitCodeOf maps the final event of a command to airlock's exit code: the
// command's own code; 128+N for a command killed by signal N (as shells
// do); for an error event its code's exit code in apiv1's error vocabulary
// (127 for exec_failed, the command could not be executed; 1 otherwise).
func exitCodeOf(ev client.Event) int {
	switch ev.Kind {
	case apiv1.EventExit:
		if ev.Signal != "" {
			if n, ok := signalNumber(ev.Signal); ok {
				return 128 + n
			}
			return exitUnknownEnd
		}
		if ev.ExitCode < 0 || ev.ExitCode > 255 {
			return exitUnknownEnd
		}
		return ev.ExitCode
	case apiv1.EventError:
		if ev.Err != nil {
			return apiv1.ExitCode(ev.Err.Code)
		}
		return exitFailure
	}
	return exitFailure
}

// endMessage is what airlock prints on stderr about a command's end: nothing
// for a normal exit.
func endMessage(ev client.Event) string {
	switch {
	case ev.Kind == apiv1.EventExit && ev.TimedOut:
		return "airlock: the command timed out and was killed"
	case ev.Kind == apiv1.EventExit && ev.Signal != "":
		return "airlock: the command was killed by SIG" + strings.TrimPrefix(ev.Signal, "SIG")
	case ev.Kind == apiv1.EventError && ev.Err != nil:
		return "error: " + apiErrorText(*ev.Err)
	case ev.Kind == apiv1.EventError:
		return "error: the command failed without a reason"
	}
	return ""
}

// linuxSignal returns the number of a standard Linux signal (x86, arm and
// most others): the guest is Linux whatever the client runs on.
func linuxSignal(name string) (int, bool) {
	names := [...]string{1: "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1",
		"SEGV", "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
		"URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"}
	switch name {
	case "IOT":
		return 6, true
	case "POLL":
		return 29, true
	}
	for n, s := range names {
		if s != "" && s == name {
			return n, true
		}
	}
	return 0, false
}

// signalNumber maps a signal name ("KILL", "SIGKILL") or number ("9") to
// its Linux number.
func signalNumber(name string) (int, bool) {
	name = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if n, ok := linuxSignal(name); ok {
		return n, true
	}
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 128 {
		return n, true
	}
	if rest, ok := strings.CutPrefix(name, "RTMIN+"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && 34+n <= 64 {
			return 34 + n, true
		}
	}
	return 0, false
}

func (a *app) runCommand() *cobra.Command {
	var (
		cf         createFlags
		pf         commandFlags
		waitDelete bool
		verbose    bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] [-- COMMAND [ARG...]]",
		Short: "Run a command in a new sandbox, then delete the sandbox",
		Long: "Create a sandbox, wait until it runs, run the command in it streaming its output,\n" +
			"and delete the sandbox — always, also when something fails or on Ctrl-C. airlock\n" +
			"exits with the command's exit code, like exec. Flags go before the command.\n" +
			"Without a COMMAND, the template's default command runs (an OCI image's entrypoint\n" +
			"and cmd).",
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := optionalCommandArgs(cmd, args)
			sreq, err := cf.request()
			if err != nil {
				return err
			}
			creq, err := pf.request(argv)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var progress func(string, ...any)
			if verbose {
				progress = a.progressf
			}
			return a.run(cmd.Context(), c, sreq, creq, waitDelete, progress)
		},
	}
	cmd.Flags().SetInterspersed(false)
	fs := cmd.Flags()
	cf.register(fs)
	fs.StringVar(&pf.cwd, "cwd", "", "working directory inside the sandbox (default /)")
	fs.StringVarP(&pf.user, "user", "u", "", "run as UID[:GID] inside the sandbox (default root)")
	fs.DurationVar(&pf.timeout, "command-timeout", 0, "kill the command this long after it starts (0: never)")
	fs.BoolVarP(&pf.interactive, "interactive", "i", false, "forward our stdin to the command (end of input closes its stdin)")
	fs.BoolVar(&waitDelete, "wait-delete", false, "wait until the sandbox is deleted before exiting")
	fs.BoolVarP(&verbose, "verbose", "v", false, "show the sandbox's progress on stderr")
	return cmd
}

// deleteTimeout bounds the cleanup of run, which goes on after Ctrl-C.
const deleteTimeout = 2 * time.Minute

// run creates a sandbox, runs one command in it and deletes it.
func (a *app) run(ctx context.Context, c *client.Client, sreq apiv1.CreateSandboxRequest, creq apiv1.CreateCommandRequest, waitDelete bool, progress func(string, ...any)) (err error) {
	if sreq.Snapshot == "" {
		if err := a.waitForTemplate(ctx, c, sreq.Template); err != nil {
			return err
		}
	}
	res, err := c.CreateSandbox(ctx, sreq)
	if err != nil {
		return err
	}
	id, err := model.ParseSandboxID(res.Sandbox.ID)
	if err != nil {
		return fmt.Errorf("server returned a bad sandbox ID: %w", err)
	}
	defer func() {
		if derr := a.cleanup(ctx, c, id, waitDelete, progress); derr != nil {
			fmt.Fprintf(a.env.Stderr, "warning: %v; delete it with `airlock sandbox delete %s`\n", derr, id)
		}
	}()
	if _, err := a.waitCreated(ctx, c, res, progress); err != nil {
		return err
	}
	code, err := a.execute(ctx, c, id, creq)
	if err != nil {
		return err
	}
	return exitStatus{code}
}

// cleanup deletes the sandbox of run. It runs even after ctx was cancelled
// (Ctrl-C), under its own deadline.
func (a *app) cleanup(ctx context.Context, c *client.Client, id model.SandboxID, wait bool, progress func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	res, err := c.DeleteSandbox(ctx, id)
	if err != nil {
		return fmt.Errorf("could not delete sandbox %s: %w", id, err)
	}
	if progress != nil {
		progress("sandbox %s: deleting (operation %s)", id, res.Operation.ID)
	}
	if !wait {
		return nil
	}
	opID, err := model.ParseOperationID(res.Operation.ID)
	if err != nil {
		return fmt.Errorf("server returned a bad operation ID: %w", err)
	}
	if _, err := c.WaitOperation(ctx, opID); err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	if progress != nil {
		progress("sandbox %s: deleted", id)
	}
	return nil
}
