package integration

import (
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/pgtest"
)

// TestMain runs the package in a network namespace of its own (its servers
// each own their namespace's sandbox networks, so the package may run beside
// another copy of itself, split into groups, or beside a server on the
// machine) and stops the shared throwaway PostgreSQL cluster after the
// tests. What a test downloads it fetches in the machine's namespace
// (netnstest.InHost): this one has no route out.
func TestMain(m *testing.M) {
	os.Exit(netnstest.MainFunc(func() int { return pgtest.Run(m) }))
}
