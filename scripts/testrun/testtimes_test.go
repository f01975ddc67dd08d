package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestShareOut(t *testing.T) {
	costs := map[string]time.Duration{"A": 10 * time.Second, "B": 8 * time.Second, "C": 5 * time.Second, "D": 4 * time.Second, "E": 3 * time.Second}
	cost := func(s string) time.Duration { return costs[s] }
	tests := []struct {
		name   string
		tests  []string
		n      int
		totals []time.Duration
	}{
		{name: "one group", tests: []string{"A", "B", "C"}, n: 1, totals: []time.Duration{23 * time.Second}},
		{name: "balanced", tests: []string{"A", "B", "C", "D", "E"}, n: 2, totals: []time.Duration{14 * time.Second, 16 * time.Second}}, // longest first, each to the emptiest,
		{name: "more groups than tests", tests: []string{"A", "B"}, n: 4, totals: []time.Duration{10 * time.Second, 8 * time.Second}},
		{name: "no tests", tests: nil, n: 3, totals: []time.Duration{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups := shareOut(tt.tests, tt.n, cost)
			var got []time.Duration
			var all []string
			for _, g := range groups {
				got = append(got, g.total)
				all = append(all, g.tests...)
				// Each group keeps the package's order.
				if !slices.IsSortedFunc(g.tests, func(a, b string) int { return slices.Index(tt.tests, a) - slices.Index(tt.tests, b) }) {
					t.Errorf("group %v is out of the package's order", g.tests)
				}
			}
			slices.Sort(all)
			if !slices.Equal(all, tt.tests) && len(all)+len(tt.tests) > 0 {
				t.Errorf("groups hold %v, want each of %v once", all, tt.tests)
			}
			if len(got) != len(tt.totals) {
				t.Fatalf("totals %v, want %v", got, tt.totals)
			}
			for i := range got {
				if got[i] != tt.totals[i] {
					t.Errorf("totals %v, want %v", got, tt.totals)
				}
			}
		})
	}
}

func TestTimesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "times.json")
	if got := loadTimes(path).of("p", "TestX"); got != unknownTestTime {
		t.Fatalf("an unknown test's time = %v, want %v", got, unknownTestTime)
	}
	tt := testTimes{}
	tt.set("p", "TestX", 1500*time.Millisecond)
	if err := tt.save(path); err != nil {
		t.Fatal(err)
	}
	if got := loadTimes(path).of("p", "TestX"); got != 1500*time.Millisecond {
		t.Fatalf("time after a round trip = %v", got)
	}
}

func TestSlowestFirst(t *testing.T) {
	times := testTimes{}
	times.set("p/b", "", 5*time.Second)
	times.set("p/d", "", 90*time.Second)
	times.set("p/a", "TestX", time.Hour) // a test's time, not its package's
	got := slowestFirst([]string{"p/a", "p/b", "p/c", "p/d"}, times)
	if want := []string{"p/d", "p/b", "p/a", "p/c"}; !slices.Equal(got, want) {
		t.Fatalf("slowestFirst = %v, want %v", got, want)
	}
}
