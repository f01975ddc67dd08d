// Package benchcli is the command line of airlock-bench (cmd/airlock-bench):
// the benchmarks of internal/bench and internal/nodebench as cobra
// commands. `airlock bench ARGS` runs `airlock-bench ARGS` (internal/cli),
// so the product binary links none of the benchmark code: the in-process
// servers, the raw runtimes' peers, the simulated nodes.
//
// It keeps airlock's command-line conventions (cli.Tool): the global flags
// --output, --data-dir and --timeout; exit 1 on a failure, 2 on a usage
// error, 130 when interrupted.
package benchcli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/binpath"
	"github.com/airlockdev/airlock/internal/cli"
)

// Main runs airlock-bench as the process and returns its exit code.
func Main() int { return cli.MainTool(root(os.Args[0]), commands) }

// Run runs airlock-bench with args (without the program name) and returns
// the exit code. Cancelling ctx interrupts the running benchmark, which
// then cleans up.
func Run(ctx context.Context, env cli.Env, args []string) int {
	return cli.RunTool(ctx, env, root(""), commands, args)
}

// viaAirlock is the argv[0] `airlock bench` runs airlock-bench with
// (internal/cli): help and errors then name the commands as the user
// typed them.
const viaAirlock = "airlock bench"

// root is airlock-bench's root command, for a process started as argv0.
func root(argv0 string) *cobra.Command {
	name := "airlock-bench"
	if argv0 == viaAirlock {
		name = viaAirlock
	}
	return &cobra.Command{
		Use:         "airlock-bench",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: name},
		Short:       "Measure Airlock against the raw runtimes",
		Long: "airlock-bench measures Airlock against the raw runtimes, bare QEMU and many\n" +
			"simulated nodes; `airlock bench COMMAND` runs it (it is found next to airlock, then\n" +
			"in PATH). Most benchmarks need root and remove everything they create on exit.\n" +
			"See docs/benchmarks.md.",
	}
}

func commands(t cli.Tool) []*cobra.Command {
	return []*cobra.Command{
		createCommand(t), execCommand(t), throughputCommand(t), templateSizeCommand(t),
		templateBuildCommand(t), egressCommand(t), lifecycleCommand(t), forkCommand(t), nodesCommand(t),
		vmCommand(t), burstCommand(t), densityCommand(t),
	}
}

// report is what a benchmark prints.
type report interface {
	WriteJSON(io.Writer) error
	WriteTable(io.Writer) error
}

// writeReport writes rep to stdout as --output asks.
func writeReport(t cli.Tool, rep report) error {
	if t.JSON() {
		return rep.WriteJSON(t.Stdout())
	}
	return rep.WriteTable(t.Stdout())
}

// prepare is what a benchmark that starts Airlock checks before it runs,
// after its own flags: --log-level (as logLevel), that it runs as root,
// and the agent (--agent-binary as agentFlag, else airlock-agent next to
// airlock-bench, then in PATH).
func prepare(logLevel, agentFlag string) (level slog.Level, agent string, err error) {
	if level, err = cli.ParseLogLevel(logLevel); err != nil {
		return 0, "", err
	}
	if os.Geteuid() != 0 {
		return 0, "", bench.ErrNotRoot
	}
	if agentFlag != "" {
		agent, err = filepath.Abs(agentFlag)
		return level, agent, err
	}
	if agent, err = binpath.Find("airlock-agent"); err != nil {
		return 0, "", fmt.Errorf("%w: build it with ./scripts/build.sh or pass --agent-binary", err)
	}
	return level, agent, nil
}

// logger writes log records of level and above to stderr, as text.
func logger(t cli.Tool, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Stderr(), &slog.HandlerOptions{Level: level}))
}
