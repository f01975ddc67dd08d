package sandboxnet

import (
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// TestMain runs the package in a network namespace of its own: its tests make veths and alk* interfaces in the host namespace.
func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }
