package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// attachCommand: airlock attach SANDBOX PROCESS — follow a process started
// earlier (exec -d, or by another client).
func (a *app) attachCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attach SANDBOX PROCESS",
		Short: "Attach to a running (or exited) process and stream its output",
		Long: "Attach to a process of a sandbox, started earlier with exec -d or by another\n" +
			"client: stream its output, starting with what the sandbox still buffers (a gap\n" +
			"is reported if some was dropped), and exit with its exit code, as exec does.",
		Args: exactArgs("SANDBOX", "PROCESS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			pid, c, err := parseArgClient(a, model.ParseProcessID, args[1])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cs, err := c.CreateAttachment(ctx, sb, pid)
			if err != nil {
				return err
			}
			code, err := a.follow(ctx, c, cs.AttachURL, cs.AttachmentToken, "")
			if err != nil {
				return err
			}
			return exitStatus{code}
		},
	}
	return cmd
}

// killCommand: airlock kill SANDBOX PROCESS [--signal S].
func (a *app) killCommand() *cobra.Command {
	var signal string
	cmd := &cobra.Command{
		Use:   "kill SANDBOX PROCESS",
		Short: "Send a signal to a process (default KILL)",
		Args:  exactArgs("SANDBOX", "PROCESS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := parseArg(model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			pid, err := parseArg(model.ParseProcessID, args[1])
			if err != nil {
				return err
			}
			if _, err := model.ParseSignal(signal); err != nil {
				return usageErrorf("--signal: %w", err)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.SignalProcess(cmd.Context(), sb, pid, signal)
			if err != nil {
				return err
			}
			return a.printer().process(p)
		},
	}
	cmd.Flags().StringVarP(&signal, "signal", "s", "KILL", "signal name (TERM, INT, …) or number")
	return cmd
}

// psCommand: airlock ps SANDBOX.
func (a *app) psCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "ps SANDBOX",
		Short: "List the processes of a sandbox",
		Long:  "List the running processes of a sandbox; -a also lists exited ones the sandbox still remembers.",
		Args:  exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, c, err := parseArgClient(a, model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			l, err := c.ListProcesses(cmd.Context(), sb)
			if err != nil {
				return err
			}
			if !all {
				running := l.Processes[:0]
				for _, p := range l.Processes {
					if p.Running {
						running = append(running, p)
					}
				}
				l.Processes = running
			}
			return a.printer().processList(l)
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list exited processes")
	return cmd
}

func (p printer) process(pr apiv1.Process) error {
	return p.print(pr, func(w io.Writer) {
		fmt.Fprintf(w, "ID:\t%s\n", pr.ID)
		fmt.Fprintf(w, "PID:\t%d\n", pr.Pid)
		fmt.Fprintf(w, "Command:\t%s\n", oneLine(strings.Join(pr.Args, " ")))
		fmt.Fprintf(w, "Status:\t%s\n", processStatus(pr))
		fmt.Fprintf(w, "Started:\t%s\n", timeText(pr.StartedAt))
	})
}

func (p printer) processList(l apiv1.ProcessList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tPID\tSTATUS\tSTARTED\tCOMMAND")
		for _, pr := range l.Processes {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", pr.ID, pr.Pid, processStatus(pr), timeText(pr.StartedAt),
				textclip.Runes(oneLine(strings.Join(pr.Args, " ")), 60))
		}
	})
}

func processStatus(p apiv1.Process) string {
	switch {
	case p.Running:
		return "running"
	case p.TimedOut:
		return "timed out"
	case p.Signal != "":
		return "killed (" + p.Signal + ")"
	case p.ExitCode != nil:
		return fmt.Sprintf("exited (%d)", *p.ExitCode)
	}
	return "exited"
}
