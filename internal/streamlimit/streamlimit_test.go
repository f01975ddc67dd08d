package streamlimit

import (
	"sync"
	"testing"
)

func TestAcquire(t *testing.T) {
	l := New(2, 3) // 2 per key, 3 per project
	r1, full := l.Acquire("k1", "p")
	if full != -1 || r1 == nil {
		t.Fatalf("first: full %d", full)
	}
	r2, _ := l.Acquire("k1", "p")
	if _, full := l.Acquire("k1", "p"); full != 0 {
		t.Fatalf("third of k1: full %d, want 0 (the key's cap)", full)
	}
	r3, full := l.Acquire("k2", "p")
	if full != -1 {
		t.Fatalf("k2: full %d", full)
	}
	if rel, full := l.Acquire("k3", "p"); full != 1 || rel != nil {
		t.Fatalf("fourth of p: full %d, want 1 (the project's cap)", full)
	}
	if _, full := l.Acquire("k3", "q"); full != -1 {
		t.Fatalf("another project: full %d", full)
	}
	// A refusal counted nothing: k3 has one stream (in q), k1 two.
	r1()
	r1() // a second call does nothing
	if _, full := l.Acquire("k1", "q"); full != -1 {
		t.Fatalf("k1 after a release: full %d", full)
	}
	if _, full := l.Acquire("k1", "p"); full != 0 {
		t.Fatalf("k1 full again: full %d", full)
	}
	r2()
	r3()
	if _, full := l.Acquire("k4", "p"); full != -1 {
		t.Fatalf("p after releases: full %d", full)
	}
	if l.Max(0) != 2 || l.Max(1) != 3 {
		t.Fatalf("Max = %d, %d", l.Max(0), l.Max(1))
	}
}

func TestReleaseForgetsKeys(t *testing.T) {
	l := New(1, 1, 1)
	rel, _ := l.Acquire("a", "b", "c")
	if l.Idle() {
		t.Error("Idle with a stream open")
	}
	rel()
	if !l.Idle() {
		t.Errorf("not Idle after the release: %v", l.open)
	}
}

func TestAcquireConcurrent(t *testing.T) {
	l := New(5, 8)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		got      int
		releases []func()
	)
	for range 50 {
		wg.Go(func() {
			if rel, full := l.Acquire("k", "p"); full == -1 {
				mu.Lock()
				got++
				releases = append(releases, rel)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got != 5 {
		t.Fatalf("%d streams open, want the key's 5", got)
	}
	for _, rel := range releases {
		rel()
	}
	if !l.Idle() {
		t.Fatalf("left counted: %v", l.open)
	}
}

func TestAcquireWrongKeys(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Acquire with one key for two caps did not panic")
		}
	}()
	New(1, 1).Acquire("only")
}
