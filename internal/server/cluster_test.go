package server

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// A node reports its templates when it registers, not a heartbeat later:
// registering clears the list, and placement passes over a node that holds
// no template.
func TestRegisterReportsTemplates(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	digest := model.TemplateDigest("sha256:" + string(slices.Repeat([]byte("ab"), 32)))
	if err := st.PutTemplate(ctx, model.Template{Digest: digest, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	node := model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleNode,
		AdvertiseURL: "http://10.0.0.1:7070", Slots: 4}
	m := &membership{st: st, node: node, interval: time.Hour, deadAfter: 3 * time.Hour, log: slog.New(slog.DiscardHandler),
		templates: func() ([]model.TemplateDigest, error) { return []model.TemplateDigest{digest}, nil }}
	if err := m.register(ctx); err != nil {
		t.Fatal(err)
	}
	holders, err := st.NodesWithTemplate(ctx, digest)
	if err != nil || !slices.Equal(holders, []model.NodeID{node.ID}) {
		t.Fatalf("holders of the template right after registering: %v (%v)", holders, err)
	}
}

// TestClockOffsetPrefersShortRoundTrips: the offset comes from the
// heartbeat with the shortest round trip among the last few, so one that
// waited on a lock does not move the clock leases are written in.
func TestClockOffsetPrefersShortRoundTrips(t *testing.T) {
	m := &membership{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A quick round trip: the database is 5 s ahead.
	m.sync(t0, t0.Add(2*time.Millisecond), t0.Add(5*time.Second+time.Millisecond))
	if got := time.Duration(m.offset.Load()); got != 5*time.Second {
		t.Fatalf("offset %v, want 5s", got)
	}
	// A slow one (it waited 4 s): ignored while the quick one is recent.
	m.sync(t0.Add(time.Minute), t0.Add(time.Minute+4*time.Second), t0.Add(time.Minute+5*time.Second))
	if got := time.Duration(m.offset.Load()); got != 5*time.Second {
		t.Fatalf("offset after a slow heartbeat %v, want 5s", got)
	}
	// Once the quick sample is older than the window, the best of the
	// recent ones counts.
	for i := range clockSamples {
		at := t0.Add(time.Duration(i+2) * time.Minute)
		m.sync(at, at.Add(10*time.Millisecond), at.Add(-3*time.Second+5*time.Millisecond))
	}
	if got := time.Duration(m.offset.Load()); got != -3*time.Second {
		t.Fatalf("offset %v, want -3s", got)
	}
}

// TestFencedMembershipReturns: a heartbeat refused as fenced ends run with
// an error (the server stops), its duty loop stopped with it.
func TestFencedMembershipReturns(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	placer, err := placement.New(placement.Config{Store: st, DeadAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := &membership{st: st, interval: 10 * time.Millisecond, deadAfter: time.Second, placer: placer,
		node: model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"},
		log:  slog.New(slog.DiscardHandler)}
	if err := m.register(ctx); err != nil {
		t.Fatal(err)
	}
	// Another run of the node starts: this one is fenced.
	if _, err := st.RegisterNode(ctx, model.Node{ID: m.node.ID, Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("run = %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a fenced membership did not return")
	}
}

// TestClusterDutiesOnOneNode: of two nodes on one store, one does the
// cluster duties; once it stops renewing its lease, the other takes them
// over and declares it dead.
func TestClusterDutiesOnOneNode(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	placer, err := placement.New(placement.Config{Store: st, DeadAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The lease lasts dutyLeaseIntervals intervals: long enough that a
	// round of duty passes never outlasts it, even on a loaded machine (at
	// 20 ms a lease lapsed between two passes under the full suite's load
	// and both nodes held it in turn, as a lease should).
	const interval = 250 * time.Millisecond
	members := make([]*membership, 2)
	for i := range members {
		members[i] = &membership{st: st, interval: interval, deadAfter: 300 * time.Millisecond, placer: placer,
			node: model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"},
			log:  slog.New(slog.DiscardHandler)}
		if err := members[i].register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		for _, m := range members {
			m.duties(ctx)
		}
		if members[0].dutyHolder == members[1].dutyHolder {
			t.Fatalf("duty holders: %v, %v; want exactly one", members[0].dutyHolder, members[1].dutyHolder)
		}
	}
	holder, other := members[0], members[1]
	if !holder.dutyHolder {
		holder, other = other, holder
	}
	// The holder stops (no heartbeats, no duties); the other heartbeats
	// on and takes the duties once the lease expired.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := st.Heartbeat(ctx, other.fence()); err != nil {
			t.Fatal(err)
		}
		other.duties(ctx)
		n, err := st.GetNode(ctx, holder.node.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n.State == model.NodeDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped holder is %s, holder of the duties now: %v", n.State, other.dutyHolder)
		}
		time.Sleep(interval)
	}
	if !other.dutyHolder {
		t.Fatal("the remaining node declared the holder dead without the lease")
	}
}
