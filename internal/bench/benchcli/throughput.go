package benchcli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func throughputCommand(t cli.Tool) *cobra.Command {
	size := "1GiB"
	def := bench.DefaultConfig()
	def.Runs, def.Warmup = 3, 1
	cmd := roundsCommand(t, "throughput",
		"Measure MB/s through stdout, stdin and files, for Airlock and raw runtime exec pipes",
		"Move --bytes through a running sandbox: stdout over SSE (head -c N /dev/zero, hashed\n"+
			"here and compared with sha256sum of the same stream inside), stdin through the data\n"+
			"plane's stdin route (sha256sum inside, compared), and file upload and download; and,\n"+
			"in the same run, stdout and stdin through `runc exec` / `crun exec` / `runsc exec` pipes\n"+
			"of an equivalent raw container. Prints MB/s (10^6 bytes/s) and the peak RSS growth of\n"+
			"this process (which also runs the airlock servers). Every transfer is checked by length\n"+
			"and SHA-256. Needs root. Everything it creates is removed on exit.",
		def,
		func(ctx context.Context, cfg bench.Config) (report, error) {
			n, err := bench.ParseBytes(size)
			if err != nil {
				return nil, cli.UsageErrorf("--bytes: %v", err)
			}
			return bench.RunThroughput(ctx, cfg, n)
		})
	cmd.Flags().StringVar(&size, "bytes", size, "bytes per transfer, e.g. 1GiB, 256MiB, 1GB")
	return cmd
}
