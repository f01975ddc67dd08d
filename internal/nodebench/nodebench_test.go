package nodebench

import (
	"context"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A tiny simulation: every create is placed and claimed once, by the node
// it was placed on, the sandboxes spread over both nodes, and the store
// agrees; with and without the placer's node cache.
func TestSimulationPlacesAndClaimsEveryCreate(t *testing.T) {
	for _, cache := range []time.Duration{0, 50 * time.Millisecond} {
		cfg := DefaultConfig()
		cfg.DatabaseURL = pgtest.DSN(t)
		cfg.Nodes = []int{2}
		cfg.Creates, cfg.Clients, cfg.Projects = 50, 4, 2
		cfg.Heartbeat = 100 * time.Millisecond // the sweeps run during the step too
		cfg.Timeout = 30 * time.Second
		cfg.PlacementCache = cache
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep, err := Run(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("cache %s: %v", cache, err)
		}
		if len(rep.Steps) != 1 {
			t.Fatalf("cache %s: %d steps, want 1", cache, len(rep.Steps))
		}
		s := rep.Steps[0]
		if s.Creates != 50 || s.Failed != 0 || s.DoubleClaim != 0 || s.WrongNode != 0 || s.Check != "ok" {
			t.Errorf("cache %s: step %+v: want 50 creates, none failed, claimed twice or by another node, check ok", cache, s)
		}
		if s.MinPerNode == 0 || s.MinPerNode+s.MaxPerNode != 50 {
			t.Errorf("cache %s: %d and %d sandboxes per node: want both nodes used, 50 in all", cache, s.MinPerNode, s.MaxPerNode)
		}
		if s.PlacedPerSec <= 0 || s.ClaimedPerSec <= 0 || s.ClaimP95 < s.ClaimP50 {
			t.Errorf("cache %s: figures %+v", cache, s)
		}
	}
}
