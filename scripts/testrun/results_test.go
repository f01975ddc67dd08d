package main

import (
	"strings"
	"testing"
	"time"
)

// TestTopLevelTimeCoversParallelSubtests: a top-level test's recorded time
// runs from its start to its end, though go test's Elapsed for it leaves
// out its parallel subtests (what the groups are shared out by).
func TestTopLevelTimeCoversParallelSubtests(t *testing.T) {
	events := strings.Join([]string{
		`{"Time":"2026-12-08T01:00:00Z","Action":"run","Package":"p","Test":"TestLanes"}`,
		`{"Time":"2026-12-08T01:00:01Z","Action":"run","Package":"p","Test":"TestLanes/lane1"}`,
		`{"Time":"2026-12-08T01:01:40Z","Action":"pass","Package":"p","Test":"TestLanes/lane1","Elapsed":99}`,
		`{"Time":"2026-12-08T01:01:40Z","Action":"pass","Package":"p","Test":"TestLanes","Elapsed":10}`,
		`{"Time":"2026-12-08T01:01:40Z","Action":"run","Package":"p","Test":"TestPlain"}`,
		`{"Time":"2026-12-08T01:01:42Z","Action":"pass","Package":"p","Test":"TestPlain","Elapsed":2}`,
	}, "\n")
	r := &runner{}
	if failed := r.consume(strings.NewReader(events), "s"); failed != 0 {
		t.Fatalf("%d failed", failed)
	}
	got := map[string]time.Duration{}
	for _, res := range r.results {
		got[res.test] = res.elapsed
	}
	want := map[string]time.Duration{"TestLanes": 100 * time.Second, "TestLanes/lane1": 99 * time.Second, "TestPlain": 2 * time.Second}
	for test, d := range want {
		if got[test] != d {
			t.Errorf("%s: %v, want %v", test, got[test], d)
		}
	}
}
