// Command airlock is Airlock's one binary: `airlock server` runs the server
// and the other subcommands are its client (see internal/cli).
package main

import (
	"os"

	"github.com/airlockdev/airlock/internal/cli"
)

func main() {
	os.Exit(cli.Main())
}
