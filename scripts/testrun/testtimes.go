package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
)

// unknownTestTime is the time assumed for a test never timed here.
const unknownTestTime = 30 * time.Second

// testTimes are the last recorded times of tests, by "package.Test", and
// of unit packages, by "package." (the whole package).
type testTimes map[string]float64 // seconds

func loadTimes(path string) testTimes {
	t := testTimes{}
	b, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal(b, &t) // a damaged file: times are guesses again
	}
	return t
}

func (t testTimes) of(pkg, test string) time.Duration {
	if s, ok := t[pkg+"."+test]; ok {
		return time.Duration(s * float64(time.Second))
	}
	return unknownTestTime
}

func (t testTimes) set(pkg, test string, d time.Duration) { t[pkg+"."+test] = d.Seconds() }

// save writes the times atomically (they only steer the sharing out).
func (t testTimes) save(path string) error {
	b, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// group is a share of the tests for one process.
type group struct {
	tests []string
	total time.Duration
}

// shareOut splits tests into at most n groups of about equal total time:
// the longest first, each to the group with the least so far. Each group's
// tests keep their order in the package (their source order), so a run is
// a subsequence of the package's usual one.
func shareOut(tests []string, n int, cost func(string) time.Duration) []group {
	order := map[string]int{}
	for i, t := range tests {
		order[t] = i
	}
	byCost := slices.Clone(tests)
	slices.SortStableFunc(byCost, func(a, b string) int { return int(cost(b) - cost(a)) })
	groups := make([]group, min(n, len(tests)))
	for _, t := range byCost {
		g := &groups[0]
		for i := range groups {
			if groups[i].total < g.total {
				g = &groups[i]
			}
		}
		g.tests = append(g.tests, t)
		g.total += cost(t)
	}
	for i := range groups {
		slices.SortFunc(groups[i].tests, func(a, b string) int { return order[a] - order[b] })
	}
	return groups
}
