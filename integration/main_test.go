package integration

import (
	"testing"

	"github.com/airlockdev/airlock/internal/pgtest"
)

// TestMain stops the shared throwaway PostgreSQL cluster after the tests.
func TestMain(m *testing.M) { pgtest.Main(m) }
