package dataplane

import (
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

type activityRecorder struct {
	mu      sync.Mutex
	touched map[model.SandboxID]int
	held    map[model.SandboxID]int
}

func (a *activityRecorder) Touch(id model.SandboxID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.touched[id]++
}

func (a *activityRecorder) Hold(id model.SandboxID) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[id]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.held[id]--
	}
}

func (a *activityRecorder) counts(id model.SandboxID) (touched, held int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.touched[id], a.held[id]
}

// TestAttachHoldsSandboxActive: an attach is activity, and its sandbox is
// held active while the stream is open.
func TestAttachHoldsSandboxActive(t *testing.T) {
	f := newFixture(t)
	rec := &activityRecorder{touched: map[model.SandboxID]int{}, held: map[model.SandboxID]int{}}
	f.dp.cfg.Activity = rec
	pid, tok := f.session(f.sandbox, "sh", "-c", "echo ready; sleep 30")
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	readEvents(t, resp.Body, func(ev sseEvent) bool { return ev.name == apiv1.EventStdout })
	if touched, held := rec.counts(f.sandbox); touched != 1 || held != 1 {
		t.Fatalf("while attached: touched %d held %d, want 1 and 1", touched, held)
	}
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, held := rec.counts(f.sandbox); held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox is still held 10 s after the client went away")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
