package benchcli

import (
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// TestMain runs the package in a network namespace of its own: its tests run benchmarks, whose servers each own their network namespace's egress.
func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }
