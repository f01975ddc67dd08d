package benchcli

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func vmCommand(t cli.Tool) *cobra.Command {
	var runs, warmup, memoryMiB, idle int
	var agentBinary, guestbootDir, logLevel string
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Measure microVM cold boot, base-snapshot restore, suspend, wake and idle memory against bare QEMU",
		Long: "In one run, on the same kernel, initramfs and busybox template: bare qemu-system-x86_64\n" +
			"booting them with the runtime's devices (start → the guest agent's answer) and restoring\n" +
			"a migration stream it saved itself; Airlock's qemu runtime creating a sandbox cold and from\n" +
			"a base snapshot (create → first output of echo hello), suspending and waking it; and the\n" +
			"host memory (smaps_rollup Pss, Private_Dirty) of --idle base-snapshot clones against\n" +
			"--idle cold-booted VMs. Prints p50/p95 per figure, the phases of Airlock's creates, the\n" +
			"restore speed-up and whether it meets the issue's target (≥ 8× faster than a cold boot).\n" +
			"The boot inputs are built into DATA_DIR/guestboot (or --guestboot-dir) and reused. Needs\n" +
			"root. Everything it creates is removed on exit, also on Ctrl-C.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 || warmup < 0 || idle < 0 {
				return cli.UsageErrorf("--runs must be at least 1, --warmup and --idle not negative")
			}
			level, agent, err := prepare(logLevel, agentBinary)
			if err != nil {
				return err
			}
			if guestbootDir == "" {
				dd, err := t.DataDir()
				if err != nil {
					return err
				}
				guestbootDir = filepath.Join(dd, "guestboot")
			}
			opts := bench.VMOptions{
				Runs: runs, Warmup: warmup, AgentBinary: agent, GuestbootDir: guestbootDir,
				MemoryMiB: memoryMiB, Idle: idle, SkipIdle: idle == 0,
				Progress: t.Stderr(), Version: t.Version(),
				Logger: logger(t, level),
			}
			rep, err := bench.RunVM(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&runs, "runs", 10, "counted rounds")
	fs.IntVar(&warmup, "warmup", 1, "uncounted rounds before them")
	fs.IntVar(&memoryMiB, "memory-mib", 256, "guest RAM of every VM, in MiB")
	fs.IntVar(&idle, "idle", 8, "VMs of each kind (base clones, cold boots) for the idle-memory figure; 0 skips it")
	fs.StringVar(&agentBinary, "agent-binary", "", "path of the static airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&guestbootDir, "guestboot-dir", "", "cache of the boot inputs (default: DATA_DIR/guestboot)")
	fs.StringVar(&logLevel, "log-level", "warn", "level of the runtime's warnings on stderr")
	return cmd
}
