package benchcli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/bench"
	"github.com/airlockdev/airlock/internal/cli"
)

func templateSizeCommand(t cli.Tool) *cobra.Command {
	var size, cacheDir string
	def := bench.DefaultConfig()
	def.Runs = 10
	cmd := roundsCommand(t, "template-size",
		"Measure create → first output from a large template against the default one",
		"Measure the time from asking for a new sandbox to the first stdout byte of `echo hello`\n"+
			"in it, from the default (busybox, about 2 MB) template and from a large one (the same\n"+
			"tree plus --size of incompressible files), side by side in the same rounds, for\n"+
			"Airlock on each of --runtimes. Prints p50/p95 per subject and the large template's\n"+
			"p50 over the default's (target: at most 1.1×). The large template is generated and\n"+
			"imported once and kept in --cache-dir, so reruns do not import it again. --peers is\n"+
			"ignored. Needs root. Everything else it creates is removed on exit.",
		def,
		func(ctx context.Context, cfg bench.Config) (report, error) {
			n, err := bench.ParseBytes(size)
			if err != nil {
				return nil, cli.UsageErrorf("--size: %w", err)
			}
			return bench.RunTemplateSize(ctx, cfg, bench.TemplateSizeOptions{LargeBytes: n, CacheDir: cacheDir})
		})
	cmd.Flags().StringVar(&size, "size", "1GiB", "file data the large template adds to the default one")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", bench.DefaultCacheDir(), "where the large template is kept between runs ($AIRLOCK_BENCH_CACHE)")
	return cmd
}
