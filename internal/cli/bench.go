package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/binpath"
)

// benchBinary is the program `airlock bench` runs: the benchmarks are a
// binary of their own (cmd/airlock-bench), so that airlock links none of
// their code (in-process servers, raw runtime peers, simulated nodes).
const benchBinary = "airlock-bench"

// benchArgv0 is airlock-bench's argv[0] when airlock runs it: its help and
// errors then name its commands `airlock bench …` (benchcli.Main).
const benchArgv0 = "airlock bench"

func (a *app) benchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Measure Airlock against the raw runtimes (runs airlock-bench)",
		Long: "Run the benchmarks: `airlock bench ARGS` runs `airlock-bench ARGS`, found next to\n" +
			"the airlock binary, then in PATH, and exits with its exit code. `airlock bench --help`\n" +
			"lists them (create, burst, density, exec, throughput, template-size, template-build,\n" +
			"egress, lifecycle, vm, nodes). ./scripts/build.sh builds airlock-bench beside airlock.",
		// Everything after `bench`, flags too, is airlock-bench's.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := binpath.Find(benchBinary)
			if err != nil {
				return fmt.Errorf("airlock bench runs %s: %w; build it beside airlock with ./scripts/build.sh, or: go build -o %s ./cmd/airlock-bench",
					benchBinary, err, binpath.Beside(benchBinary))
			}
			return a.runBench(cmd.Context(), path, args)
		},
	}
}

// runBench runs airlock-bench at path with args. As the process (Main) it
// executes it in this process's place: same pid, streams and signals, so
// a ^C or a SIGTERM reaches the benchmark once and it cleans up, and its
// exit code is airlock's. Otherwise (Run with streams of its own) it runs
// it as a child on the Env's streams, interrupts it with SIGINT when ctx
// ends and waits for its cleanup.
func (a *app) runBench(ctx context.Context, path string, args []string) error {
	if a.env.process {
		if err := syscall.Exec(path, append([]string{benchArgv0}, args...), os.Environ()); err != nil {
			return fmt.Errorf("run %s: %w", path, err)
		}
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Args[0] = benchArgv0
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.env.Stdin, a.env.Stdout, a.env.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // as a shell reports it
		}
		return exitStatus{code}
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", path, err)
	}
	return nil
}
