package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// withLifecycle adds `pause`, `resume`, `suspend` and `wake` to the
// sandbox command group.
func (a *app) withLifecycle(sandbox *cobra.Command) *cobra.Command {
	sandbox.AddCommand(a.lifecycleCommands()...)
	return sandbox
}

// lifecycleCommands are `sandbox pause|resume|suspend|wake`.
func (a *app) lifecycleCommands() []*cobra.Command {
	return []*cobra.Command{
		a.lifecycleCommand(model.OpPause, "Pause a running sandbox and wait until it is paused",
			"Pause a running sandbox: its processes freeze and its memory stays resident; it\n"+
				"uses no CPU. A paused sandbox refuses new commands (sandbox_paused) until it is\n"+
				"resumed, unless `airlock exec --resume` asks to resume it first."),
		a.lifecycleCommand(model.OpResume, "Resume a paused sandbox and wait until it runs",
			"Resume a paused sandbox: its processes continue where they were."),
		a.lifecycleCommand(model.OpSuspend, "Suspend a sandbox to a snapshot and wait until it is suspended",
			"Suspend a running or paused sandbox: write a snapshot and free its processes'\n"+
				"memory and CPU. The sandbox's Snapshot line says what was kept: \"memory\" (its\n"+
				"processes continue on wake, runsc) or \"filesystem\" (only its files; on wake it\n"+
				"boots again, runc).\n\n"+
				"--keep-memory=false asks for a filesystem-only suspend (processes end, files\n"+
				"kept), --keep-memory for one that keeps memory; the server refuses the one the\n"+
				"sandbox's runtime cannot do (runsc does both, qemu keeps memory, runc and crun do not)."),
		a.lifecycleCommand(model.OpWake, "Wake a suspended sandbox and wait until it runs",
			"Wake a suspended sandbox from its snapshot."),
	}
}

func (a *app) lifecycleCommand(kind model.OperationKind, short, long string) *cobra.Command {
	var noWait, keepMemory bool
	cmd := &cobra.Command{
		Use:   string(kind) + " SANDBOX",
		Short: short,
		Long: long + "\n\nBy default the command waits for the operation, showing progress on stderr, and\n" +
			"fails if it fails; --no-wait returns once the server has accepted the request.",
		Args: exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var res apiv1.SandboxWithOperation
			if kind == model.OpSuspend && cmd.Flags().Changed("keep-memory") {
				res, err = c.SuspendSandboxKeeping(ctx, id, keepMemory)
			} else {
				res, err = c.LifecycleSandbox(ctx, id, kind)
			}
			if err != nil {
				return err
			}
			if snap := res.Sandbox.Snapshot; kind == model.OpWake && snap != nil && snap.Kind == apiv1.SnapshotFilesystem {
				// Never let a wake look like processes survived.
				a.progressf("sandbox %s: its snapshot kept the filesystem only: it boots again, and the processes it ran before the suspend do not continue", id)
			}
			if noWait {
				return a.printer().sandboxWithOperation(res)
			}
			res, waitErr := a.waitCreated(ctx, c, res, a.progressf)
			if err := a.printer().sandboxWithOperation(res); err != nil {
				return err
			}
			var failed *client.OperationFailedError
			if errors.As(waitErr, &failed) {
				return fmt.Errorf("%w; the sandbox is %s", waitErr, res.Sandbox.State)
			}
			return waitErr
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the request is accepted")
	if kind == model.OpSuspend {
		cmd.Flags().BoolVar(&keepMemory, "keep-memory", false, "require a suspend that keeps memory (true) or only the filesystem (false); default: what the runtime keeps")
	}
	return cmd
}

// snapshotField prints what a suspended sandbox's snapshot kept.
func snapshotField(w io.Writer, s *apiv1.Snapshot) {
	if s == nil {
		return
	}
	what := "memory and processes (they continue on wake)"
	if s.Kind == apiv1.SnapshotFilesystem {
		what = "filesystem only (processes do not survive; the sandbox boots again on wake)"
	}
	fmt.Fprintf(w, "Snapshot:\t%s: %s, %s, %s\n", s.Kind, what, byteSize(s.SizeBytes), timeText(s.CreatedAt))
}
