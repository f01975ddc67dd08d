package envdfs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestWatchersLimits(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	ws := NewWatchersWithLimits(slog.New(slog.DiscardHandler), WatcherLimits{Max: 3, MaxPerSandbox: 2, MaxQueued: 4, Idle: time.Hour, OpenTimeout: time.Second}, clock.now)
	defer ws.Close()
	add := func(sb model.SandboxID) (*pollWatcher, error) {
		_, cancel := context.WithCancel(ws.ctx)
		w := &pollWatcher{id: newWatcherID(), sandbox: sb, cancel: cancel, lastPoll: clock.now()}
		err := ws.reserve(sb, w)
		if err != nil {
			cancel()
		}
		return w, err
	}
	steps := []struct {
		sb   model.SandboxID
		code connect.Code // 0: admitted
	}{
		{"sba", 0},
		{"sba", 0},
		{"sba", connect.CodeResourceExhausted}, // per sandbox
		{"sbb", 0},
		{"sbc", connect.CodeResourceExhausted}, // total
	}
	var first *pollWatcher
	for i, s := range steps {
		w, err := add(s.sb)
		if connect.CodeOf(err) != s.code && !(s.code == 0 && err == nil) {
			t.Fatalf("step %d (%s): %v, want %v", i, s.sb, err, s.code)
		}
		if i == 0 {
			first = w
		}
	}
	if _, ok := ws.lookup("sbb", first.id); ok {
		t.Error("another sandbox's watcher was found")
	}
	if _, ok := ws.lookup("sba", first.id); !ok {
		t.Error("own watcher not found")
	}
	if w := ws.drop(first.id); w != first {
		t.Error("drop returned another watcher")
	}
	if _, err := add("sbc"); err != nil {
		t.Errorf("after a drop: %v", err)
	}
}

func TestWatchersExpireAndClose(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	ws := NewWatchersWithLimits(slog.New(slog.DiscardHandler), WatcherLimits{Max: 10, MaxPerSandbox: 10, MaxQueued: 4, Idle: 40 * time.Millisecond, OpenTimeout: time.Second}, clock.now)
	ctx, cancel := context.WithCancel(ws.ctx)
	w := &pollWatcher{id: "w1", sandbox: "sba", cancel: cancel, lastPoll: clock.now()}
	if err := ws.reserve("sba", w); err != nil {
		t.Fatal(err)
	}
	// A goroutine owned by the registry, as runWatcher is.
	ws.wg.Add(1)
	stopped := make(chan struct{})
	go func() {
		defer ws.wg.Done()
		<-ctx.Done()
		close(stopped)
	}()
	time.Sleep(100 * time.Millisecond)
	if _, ok := ws.lookup("sba", "w1"); !ok {
		t.Fatal("watcher expired without time passing")
	}
	clock.add(time.Second)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("idle watcher was not stopped")
	}
	if _, ok := ws.lookup("sba", "w1"); ok {
		t.Error("expired watcher still registered")
	}
	ws.Close()
	if err := ws.reserve("sba", &pollWatcher{id: "w2", sandbox: "sba", cancel: func() {}}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("reserve after Close: %v", err)
	}
}

// TestTreeHandle: names are relative to the root, a subdirectory's own
// end is left to its parent's event, the root's end ends the watch.
func TestTreeHandle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tw := &treeWatch{ctx: ctx, cancel: cancel, root: "/r", watches: map[string]*client.FileWatch{}}
	tests := []struct {
		it      dirItem
		want    []string
		wantErr error
	}{
		{dirItem{dir: "/r", ev: apiv1.FileEvent{Type: "create", Path: "/r/a"}}, []string{"EVENT_TYPE_CREATE a"}, nil},
		{dirItem{dir: "/r/s", ev: apiv1.FileEvent{Type: "write", Path: "/r/s/x"}}, []string{"EVENT_TYPE_WRITE s/x"}, nil},
		{dirItem{dir: "/r/s", ev: apiv1.FileEvent{Type: "remove", Path: "/r/s", IsDir: true}}, nil, nil},
		{dirItem{dir: "/r/s", err: io.EOF}, nil, nil},
		{dirItem{dir: "/r", ev: apiv1.FileEvent{Type: "remove", Path: "/r", IsDir: true}}, []string{"EVENT_TYPE_REMOVE ."}, nil},
		{dirItem{dir: "/r", err: io.EOF}, nil, errRootGone},
	}
	for _, tt := range tests {
		evs, err := tw.handle(tt.it)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("handle(%+v) error %v, want %v", tt.it, err, tt.wantErr)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.GetType().String()+" "+e.GetName())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("handle(%+v) = %v, want %v", tt.it, got, tt.want)
		}
	}
	if _, err := tw.handle(dirItem{dir: "/r", err: errors.New("connection reset")}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("root watch broken: %v", err)
	}
}
