package sqlstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

func TestRebindDollar(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b = ?", "a = $1 AND b = $2"},
		{"x IN (?, ?, ?) LIMIT ?", "x IN ($1, $2, $3) LIMIT $4"},
		{"v = '?' AND w = ?", "v = '?' AND w = $1"},
		{`"we?ird" = ?`, `"we?ird" = $1`},
		{"a = ? -- what?\nAND b = ?", "a = $1 -- what?\nAND b = $2"},
		{"a = 'it''s?' AND b = ?", "a = 'it''s?' AND b = $1"},
		{"unterminated '?", "unterminated '?"},
		{"trailing comment -- ?", "trailing comment -- ?"},
	} {
		if got := RebindDollar(tc.in); got != tc.want {
			t.Errorf("RebindDollar(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzRebindDollar(f *testing.F) {
	for _, s := range []string{"a = ?", "'?' ?", `"?"?`, "-- ?\n?", "??", "'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := RebindDollar(s)
		if !strings.Contains(s, "?") && out != s {
			t.Fatalf("query without placeholders changed: %q → %q", s, out)
		}
		// Only '?' may change, and each into $n: removing both gives the same text.
		strip := func(x string) string {
			var b strings.Builder
			for i := 0; i < len(x); i++ {
				switch {
				case x[i] == '?':
				case x[i] == '$':
					for i+1 < len(x) && x[i+1] >= '0' && x[i+1] <= '9' {
						i++
					}
				default:
					b.WriteByte(x[i])
				}
			}
			return b.String()
		}
		if !strings.ContainsAny(s, "$0123456789") && strip(s) != strip(out) {
			t.Fatalf("RebindDollar(%q) = %q changed more than placeholders", s, out)
		}
	})
}

func TestBroadcaster(t *testing.T) {
	b := newBroadcaster()
	ctx, cancel := context.WithCancel(context.Background())
	w1, w2 := b.Subscribe(ctx), b.Subscribe(context.Background())
	if b.Len() != 2 {
		t.Fatalf("Len = %d", b.Len())
	}
	for i := 0; i < 5; i++ {
		b.Broadcast() // never blocks
	}
	if len(w1) != 1 || len(w2) != 1 {
		t.Fatalf("pending wake-ups %d, %d; want 1, 1", len(w1), len(w2))
	}
	<-w1
	cancel()
	for range w1 { // closed soon after cancel
	}
	for deadline := time.Now().Add(5 * time.Second); b.Len() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Len = %d after cancel, want 1", b.Len())
		}
	}
	b.Close()
	<-w2 // the pending wake-up is still delivered
	if _, ok := <-w2; ok {
		t.Fatal("w2 open after Close")
	}
	if _, ok := <-b.Subscribe(context.Background()); ok {
		t.Fatal("Subscribe after Close returned an open channel")
	}
	b.Broadcast() // no panic on a closed broadcaster
}

func TestBroadcasterConcurrent(t *testing.T) {
	b := newBroadcaster()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				b.Broadcast()
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				ctx, cancel := context.WithCancel(context.Background())
				ch := b.Subscribe(ctx)
				cancel()
				for range ch {
				}
			}
		}()
	}
	wg.Wait()
	b.Close()
	if b.Len() != 0 {
		t.Fatalf("Len = %d after Close", b.Len())
	}
}

// TestBroadcasterTopics: a topic's subscriber wakes for changes that name
// it or every topic; a coarse one for every change, one naming no topic
// included.
func TestBroadcasterTopics(t *testing.T) {
	b := newBroadcaster()
	defer b.Close()
	a, n := nodeTopic("node_a"), nodeTopic("node_b")
	subs := map[string]<-chan struct{}{
		"coarse": b.Subscribe(context.Background()),
		"A":      b.SubscribeTopic(context.Background(), a),
		"B":      b.SubscribeTopic(context.Background(), n),
		"builds": b.SubscribeTopic(context.Background(), topicBuilds),
	}
	for _, tc := range []struct {
		name string
		c    change
		want []string
	}{
		{"node A", change{topics: []string{a}}, []string{"coarse", "A"}},
		{"nodes A and B", change{topics: []string{a, n}}, []string{"coarse", "A", "B"}},
		{"builds", change{topics: []string{topicBuilds}}, []string{"coarse", "builds"}},
		{"no topic", change{scoped: true}, []string{"coarse"}},
		{"every topic", change{topics: []string{topicAll}}, []string{"coarse", "A", "B", "builds"}},
	} {
		b.Notify(tc.c)
		for name, ch := range subs {
			woke := len(ch) == 1
			if woke {
				<-ch
			}
			if want := slices.Contains(tc.want, name); woke != want {
				t.Errorf("%s: %s woke %v, want %v", tc.name, name, woke, want)
			}
		}
	}
}

// TestPayload: a change travels as a NOTIFY payload and back, one naming
// too many topics as every topic; an empty payload (a process that sends
// none) concerns every topic.
func TestPayload(t *testing.T) {
	many := change{}
	for range 200 {
		many.add(nodeTopic(model.NewNodeID()))
	}
	for _, tc := range []struct {
		name    string
		c       change
		payload string
		topics  []string
	}{
		{"one node", change{topics: []string{nodeTopic("node_a")}}, "node:node_a", []string{"node:node_a"}},
		{"two topics", change{topics: []string{nodeTopic("node_a"), topicBuilds}}, "node:node_a builds", []string{"node:node_a", "builds"}},
		{"no topic", change{scoped: true}, payloadNone, nil},
		{"every topic", change{topics: []string{nodeTopic("node_a"), topicAll}}, topicAll, []string{topicAll}},
		{"too many", many, topicAll, []string{topicAll}},
	} {
		p := tc.c.payload()
		if p != tc.payload {
			t.Errorf("%s: payload %q, want %q", tc.name, p, tc.payload)
		}
		if got := parsePayload(p).topics; !slices.Equal(got, tc.topics) {
			t.Errorf("%s: parsed %q as %q, want %q", tc.name, p, got, tc.topics)
		}
	}
	if got := parsePayload(""); !got.all() {
		t.Errorf("empty payload parsed as %+v, want every topic", got)
	}
}
