package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// timeoutFlags are the deadline and idle flags of `sandbox create` and `run`.
// The deadline's flag is --sandbox-timeout: --timeout is the global flag
// that bounds how long the CLI itself waits.
type timeoutFlags struct {
	fs        *pflag.FlagSet
	timeout   time.Duration
	onTimeout string
	keep      bool
	idle      time.Duration
}

func (f *timeoutFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.DurationVar(&f.timeout, "sandbox-timeout", 0, "delete (or suspend, --on-timeout) the sandbox this long after it is created, whatever its activity, e.g. 2h (default: never)")
	fs.StringVar(&f.onTimeout, "on-timeout", "", "what happens when --sandbox-timeout passes: delete or suspend (default: delete)")
	fs.BoolVar(&f.keep, keepFlag, false, keepUsage)
	fs.DurationVar(&f.idle, "idle-timeout", 0, "suspend the sandbox after this long without activity; 0: never (default: the server's --default-idle-timeout, 6h)")
}

// seconds converts a duration flag to whole seconds.
func seconds(flag string, d time.Duration) (int64, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, usageErrorf("--%s must be whole seconds, 0 or more, such as 90s or 2h, not %s", flag, d)
	}
	return int64(d / time.Second), nil
}

// keepFlag says what a deadline's suspend keeps (timeout_keep_memory).
const (
	keepFlag  = "timeout-keep-memory"
	keepUsage = "with --on-timeout suspend: =false keeps only the files at the deadline (processes end; the wake boots again), =true memory and processes (default: what the runtime's suspend keeps)"
)

// apply adds the flags given to a create request.
func (f *timeoutFlags) apply(req *apiv1.CreateSandboxRequest) error {
	var err error
	if req.Timeout, err = seconds("sandbox-timeout", f.timeout); err != nil {
		return err
	}
	if f.onTimeout != "" {
		on, err := model.ParseOnTimeout(f.onTimeout)
		if err != nil {
			return usageErrorf("--on-timeout must be delete or suspend, not %q", f.onTimeout)
		}
		if f.timeout == 0 {
			return usageErrorf("--on-timeout needs --sandbox-timeout")
		}
		req.OnTimeout = string(on)
	}
	if f.fs != nil && f.fs.Changed(keepFlag) {
		keep := f.keep
		req.TimeoutKeepMemory = &keep
	}
	if f.fs != nil && f.fs.Changed("idle-timeout") {
		s, err := seconds("idle-timeout", f.idle)
		if err != nil {
			return err
		}
		req.IdleTimeout = &s
	}
	return nil
}

func (a *app) sandboxTimeoutCommand() *cobra.Command {
	var (
		onTimeout string
		keep      bool
	)
	cmd := &cobra.Command{
		Use:   "timeout SANDBOX DURATION",
		Short: "Set or remove a sandbox's deadline",
		Long: "Set the sandbox's deadline DURATION from now (e.g. 30m; 0 removes it). When it\n" +
			"passes the sandbox is deleted, or suspended with --on-timeout suspend (its\n" +
			"current choice is kept unless the flag is given).",
		Args: exactArgs("SANDBOX", "DURATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(args[1])
			if err != nil {
				return usageErrorf("DURATION %q: %w", args[1], err)
			}
			req := apiv1.SetTimeoutRequest{}
			if req.Timeout, err = seconds("DURATION", d); err != nil {
				return err
			}
			if onTimeout != "" {
				on, err := model.ParseOnTimeout(onTimeout)
				if err != nil {
					return usageErrorf("--on-timeout must be delete or suspend, not %q", onTimeout)
				}
				req.OnTimeout = string(on)
			}
			if cmd.Flags().Changed(keepFlag) {
				req.TimeoutKeepMemory = &keep
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			sb, err := c.SetSandboxTimeout(cmd.Context(), id, req)
			if err != nil {
				return err
			}
			return a.printer().sandbox(sb)
		},
	}
	cmd.Flags().StringVar(&onTimeout, "on-timeout", "", "what happens at the deadline: delete or suspend (default: the sandbox's current choice)")
	cmd.Flags().BoolVar(&keep, keepFlag, false, keepUsage+"; without it the sandbox's choice stays unless --on-timeout is given")
	return cmd
}

// timeoutFields are the deadline and idle lines of a sandbox's table.
func timeoutFields(w io.Writer, sb apiv1.Sandbox) {
	if sb.TimeoutAt != nil {
		then := sb.OnTimeout
		if k := sb.TimeoutKeepMemory; k != nil && !*k {
			then += ", keeping only the files"
		} else if k != nil {
			then += ", keeping memory"
		}
		fmt.Fprintf(w, "Deadline:\t%s (then %s)\n", timeText(*sb.TimeoutAt), then)
	}
	idle := "never"
	if sb.IdleTimeout > 0 {
		idle = (time.Duration(sb.IdleTimeout) * time.Second).String()
	}
	fmt.Fprintf(w, "Idle:\t%s\n", idle)
	if sb.LastActivityAt != nil {
		fmt.Fprintf(w, "Active:\t%s\n", timeText(*sb.LastActivityAt))
	}
}
