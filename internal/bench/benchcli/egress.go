package benchcli

import (
	"encoding/json"
	"log/slog"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func egressCommand(t cli.Tool) *cobra.Command {
	var runtimeName, size, agentBinary, logLevel string
	var runs, rounds int
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Measure the latency the egress proxy adds to new HTTPS connections, and its throughput",
		Long: "Build a fake internet of network namespaces on this machine (nothing leaves it), run an\n" +
			"airlock server in its host namespace with one sandbox, and time new HTTPS connections\n" +
			"(dial, TLS handshake, GET, whole answer): straight from the host namespace, and from the\n" +
			"sandbox through the proxy without interception (a tls_exempt name) and with it (cached\n" +
			"leaf). Prints p50/p95 and the latency added over direct (targets: at most 2 ms and 5 ms),\n" +
			"then one --bytes download through the proxy over HTTP and intercepted HTTPS (target: at\n" +
			"least 300 MB/s). Needs root. Everything it creates is removed on exit.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 || rounds < 1 {
				return cli.UsageErrorf("--runs and --rounds must be at least 1")
			}
			n, err := bench.ParseBytes(size)
			if err != nil {
				return cli.UsageErrorf("--bytes: %v", err)
			}
			level, agent, err := prepare(logLevel, agentBinary)
			if err != nil {
				return err
			}
			opts := bench.EgressOptions{Runtime: runtimeName, Runs: runs, Rounds: rounds, DownloadBytes: n,
				AgentBinary: agent, Progress: t.Stderr()}
			if level <= slog.LevelDebug { // show the server's own log
				opts.ServerLog = t.Stderr()
			}
			rep, err := bench.RunEgress(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&runtimeName, "runtime", "runc", "the server's runtime: runc, crun or runsc (runsc adds its user-space network stack's cost)")
	fs.IntVar(&runs, "runs", 200, "new connections measured per subject")
	fs.IntVar(&rounds, "rounds", 5, "rounds the runs are split into (subjects in random order per round)")
	fs.StringVar(&size, "bytes", "1GiB", "size of the large download, e.g. 1GiB, 256MiB")
	fs.StringVar(&agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock-bench, then in PATH)")
	fs.StringVar(&logLevel, "log-level", "warn", "debug also prints the server's log on stderr")
	cmd.AddCommand(egressProbeCommand(t))
	return cmd
}

// egressProbeCommand is the probe `airlock bench egress` runs inside
// its sandbox and its fake host namespace; it prints JSON.
func egressProbeCommand(t cli.Tool) *cobra.Command {
	var cfg bench.EgressProbeConfig
	var dnsServer string
	cmd := &cobra.Command{
		Use:    "probe",
		Short:  "Time new connections to one name (run by `airlock bench egress` inside its sandbox)",
		Hidden: true,
		Args:   cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dnsServer != "" {
				ap, err := netip.ParseAddrPort(dnsServer)
				if err != nil {
					return cli.UsageErrorf("--dns: %v", err)
				}
				cfg.DNS = ap
			}
			res, err := bench.RunEgressProbe(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return json.NewEncoder(t.Stdout()).Encode(res)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Name, "name", "", "the server's name (resolved; SNI and Host)")
	fs.IntVar(&cfg.Port, "port", 443, "443 (HTTPS) or 80 (HTTP)")
	fs.IntVar(&cfg.Runs, "runs", 10, "new connections to time")
	fs.Int64Var(&cfg.Download, "download", 0, "then download this many bytes once")
	fs.StringVar(&dnsServer, "dns", "", "ADDRESS:PORT of the DNS server to ask instead of the system's")
	return cmd
}
