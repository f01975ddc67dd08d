package e2b

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// TestInterpreterReadyPerVersion: a sandbox's code interpreter is known to
// run as of a version of its record; any later version (a suspend and
// wake) is probed again, and concurrent first requests probe once.
func TestInterpreterReadyPerVersion(t *testing.T) {
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, UpdatedAt: time.Unix(100, 0)}
	var probes atomic.Int32
	release := make(chan struct{})
	self := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != portPath(sb.ID, CodeInterpreterPort)+"/health" || r.Header.Get("X-Test-As") != sb.ProjectID.String()+"/"+sb.ID.String() {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
			return
		}
		probes.Add(1)
		<-release
		w.WriteHeader(http.StatusOK)
	}))
	defer self.Close()
	g := newTestGatewayAPI(t, fakeSandboxes{sb.ID: sb}, self)
	native, err := g.nativeFor(sb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Eight first requests at once: one probe, all succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.interp.ensure(ctx, g, native, sb)
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them queue behind the first
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes for concurrent first requests, want 1", n)
	}
	if err := g.interp.ensure(ctx, g, native, sb); err != nil || probes.Load() != 1 {
		t.Fatalf("same version: %v, %d probes; want no new probe", err, probes.Load())
	}
	woken := sb
	woken.UpdatedAt = time.Unix(200, 0)
	if err := g.interp.ensure(ctx, g, native, woken); err != nil || probes.Load() != 2 {
		t.Fatalf("after a wake: %v, %d probes; want a new probe", err, probes.Load())
	}
	g.interp.forget(sb.ID)
	if err := g.interp.ensure(ctx, g, native, woken); err != nil || probes.Load() != 3 {
		t.Fatalf("after a 502: %v, %d probes; want a new probe", err, probes.Load())
	}
}

// TestInterpreterWaitEndsWithContext: a request waiting for another's start
// gives up when its own context ends.
func TestInterpreterWaitEndsWithContext(t *testing.T) {
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	block := make(chan struct{})
	self := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer self.Close()
	defer close(block) // before Close, which waits for the handler
	g := newTestGatewayAPI(t, fakeSandboxes{sb.ID: sb}, self)
	native, err := g.nativeFor(sb)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.interp.ensure(context.Background(), g, native, sb) }() // the first, stuck in its probe
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := g.interp.ensure(ctx, g, native, sb); err == nil {
		t.Fatal("a waiter whose context ended got no error")
	}
}
