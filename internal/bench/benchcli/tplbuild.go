package benchcli

import (
	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func templateBuildCommand(t cli.Tool) *cobra.Command {
	var peer bool
	var logLevel string
	cmd := &cobra.Command{
		Use:   "template-build",
		Short: "Measure the default template's build: cold, cached, and from the cache into a fresh store",
		Long: "Build the server's default recipe (Debian 12 with python3, node, git, …) with an empty\n" +
			"build cache and template store (cold), again with both (every step cached), look it up as\n" +
			"a server start does, and build it into a fresh store from the cache alone (a new data dir\n" +
			"on a host that built before); all must give the same digest. With --peer, also time a\n" +
			"bare mmdebstrap of the same packages (what the cold build costs without Airlock). Needs\n" +
			"root, mmdebstrap and the host's apt sources. Everything it creates is removed on exit.",
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := cli.ParseLogLevel(logLevel)
			if err != nil {
				return err
			}
			rep, err := bench.RunTemplateBuild(cmd.Context(), bench.TemplateBuildOptions{
				Peer:     peer,
				Progress: t.Stderr(),
				Logger:   logger(t, level),
			})
			if err != nil {
				return err
			}
			return writeReport(t, rep)
		},
	}
	cmd.Flags().BoolVar(&peer, "peer", true, "also time a bare mmdebstrap of the same packages")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "level of the recipe builder's logs on stderr: debug, info, warn or error")
	return cmd
}
