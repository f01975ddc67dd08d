// Command airlock-bench runs Airlock's benchmarks (see internal/bench/benchcli
// and docs/benchmarks.md). It is a binary of its own so that the product
// binary, airlock, links none of the benchmark code; `airlock bench ARGS`
// runs `airlock-bench ARGS`, found next to airlock, then in PATH.
package main

import (
	"os"

	"github.com/airlockdev/airlock/internal/bench/benchcli"
)

func main() {
	os.Exit(benchcli.Main())
}
