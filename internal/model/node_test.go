package model

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseNodeValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func(string) (string, error)
		ok    []string
		bad   []string
	}{
		{"role", func(s string) (string, error) { r, err := ParseNodeRole(s); return string(r), err },
			[]string{"all", "api", "node"}, []string{"", "All", "worker", "all "}},
		{"state", func(s string) (string, error) { st, err := ParseNodeState(s); return string(st), err },
			[]string{"active", "cordoned", "draining", "dead"}, []string{"", "Active", "paused", "dead\n"}},
		{"incarnation", func(s string) (string, error) { i, err := ParseIncarnation(s); return i.String(), err },
			[]string{NewIncarnation().String(), "inc_" + strings.Repeat("a", idRandomLen)},
			[]string{"", "inc_", "inc_" + strings.Repeat("a", idRandomLen-1), "inc_" + strings.Repeat("A", idRandomLen),
				"node_" + strings.Repeat("a", idRandomLen), NewNodeID().String()}},
		{"placement", func(s string) (string, error) { p, err := ParsePlacementStrategy(s); return string(p), err },
			[]string{"spread", "pack"}, []string{"", "Spread", "random"}},
	} {
		for _, s := range tc.ok {
			if got, err := tc.parse(s); err != nil || got != s {
				t.Errorf("%s %q = %q, %v; want it back", tc.name, s, got, err)
			}
		}
		for _, s := range tc.bad {
			if got, err := tc.parse(s); !errors.Is(err, ErrInvalid) || got != "" {
				t.Errorf("%s %q = %q, %v; want ErrInvalid", tc.name, s, got, err)
			}
		}
	}
	if !RoleAll.RunsSandboxes() || !RoleNode.RunsSandboxes() || RoleAPI.RunsSandboxes() {
		t.Error("RunsSandboxes: all and node run sandboxes, api does not")
	}
}

func TestParseNodeLabels(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name string
		in   map[string]string
		ok   bool
	}{
		{"none", nil, true},
		{"empty", map[string]string{}, true},
		{"simple", map[string]string{"zone": "eu-1a", "gpu": "true"}, true},
		{"prefixed key", map[string]string{"example.com/gpu": "a100"}, true},
		{"empty value", map[string]string{"spot": ""}, true},
		{"63 characters", map[string]string{long: long}, true},
		{"64-character key", map[string]string{long + "a": "x"}, false},
		{"64-character value", map[string]string{"k": long + "a"}, false},
		{"empty key", map[string]string{"": "x"}, false},
		{"key starts with a dash", map[string]string{"-zone": "x"}, false},
		{"key ends with a dot", map[string]string{"zone.": "x"}, false},
		{"space in value", map[string]string{"zone": "a b"}, false},
		{"equals in value", map[string]string{"zone": "a=b"}, false},
		{"upper-case prefix", map[string]string{"Example.com/x": "y"}, false},
		{"two slashes", map[string]string{"a/b/c": "y"}, false},
		{"unicode", map[string]string{"zöne": "x"}, false},
		{"too many", func() map[string]string {
			m := map[string]string{}
			for i := range MaxNodeLabels + 1 {
				m["k"+strings.Repeat("x", i)] = "v"
			}
			return m
		}(), false},
	} {
		got, err := ParseNodeLabels(tc.in)
		if !tc.ok {
			if !errors.Is(err, ErrInvalid) || got != nil {
				t.Errorf("%s: ParseNodeLabels = %v, %v; want ErrInvalid", tc.name, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseNodeLabels: %v", tc.name, err)
			continue
		}
		if len(tc.in) == 0 && got != nil || !maps.Equal(got, NodeLabels(tc.in)) {
			t.Errorf("%s: ParseNodeLabels = %v, want %v", tc.name, got, tc.in)
		}
	}
	// The result is a copy.
	in := map[string]string{"zone": "a"}
	got, err := ParseNodeLabels(in)
	if err != nil {
		t.Fatal(err)
	}
	in["zone"] = "b"
	if got["zone"] != "a" {
		t.Error("ParseNodeLabels shares the caller's map")
	}
}

func TestParseNodeLabel(t *testing.T) {
	for _, tc := range []struct {
		in, key, value string
		ok             bool
	}{
		{"zone=eu-1a", "zone", "eu-1a", true},
		{"spot=", "spot", "", true},
		{"example.com/gpu=a100", "example.com/gpu", "a100", true},
		{"zone", "", "", false},
		{"=x", "", "", false},
		{"zone=a=b", "", "", false},
		{"", "", "", false},
	} {
		k, v, err := ParseNodeLabel(tc.in)
		if tc.ok != (err == nil) || k != tc.key || v != tc.value {
			t.Errorf("ParseNodeLabel(%q) = %q, %q, %v", tc.in, k, v, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseNodeLabel(%q): %v, want ErrInvalid", tc.in, err)
		}
	}
}

func TestNodeLabelsMatches(t *testing.T) {
	l := NodeLabels{"zone": "a", "gpu": "true"}
	for _, tc := range []struct {
		sel  NodeLabels
		want bool
	}{
		{nil, true},
		{NodeLabels{"zone": "a"}, true},
		{NodeLabels{"zone": "a", "gpu": "true"}, true},
		{NodeLabels{"zone": "b"}, false},
		{NodeLabels{"zone": "a", "ssd": "true"}, false},
		{NodeLabels{"gpu": ""}, false},
	} {
		if got := l.Matches(tc.sel); got != tc.want {
			t.Errorf("%v.Matches(%v) = %v", l, tc.sel, got)
		}
	}
	if !NodeLabels(nil).Matches(nil) || NodeLabels(nil).Matches(NodeLabels{"spot": ""}) {
		t.Error("a node without labels matches exactly the empty selector")
	}
}

func TestParseAdvertiseURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://10.0.0.5:7070", "http://10.0.0.5:7070"},
		{"https://node-1.internal:7443/", "https://node-1.internal:7443"},
		{"https://lb.example.com/airlock/node-1", "https://lb.example.com/airlock/node-1"},
		{"http://[fd00::1]:7070/", "http://[fd00::1]:7070"},
		{"http://a//", "http://a"},
	} {
		got, err := ParseAdvertiseURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAdvertiseURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "node-1:7070", "ftp://a", "http://", "http:///path", "http://user:pw@a", "http://a?x=1", "http://a#f",
		"http://a/?", "mailto:x@y", "http://a b", "//a:1",
	} {
		if got, err := ParseAdvertiseURL(in); !errors.Is(err, ErrInvalid) || got != "" {
			t.Errorf("ParseAdvertiseURL(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	}
}

func TestNodeStatusFits(t *testing.T) {
	r := Resources{CPUs: 4, MemoryMiB: 512}
	for _, tc := range []struct {
		name string
		n    NodeStatus
		want bool
	}{
		{"unbounded", NodeStatus{Usage: NodeUsage{Sandboxes: 1000, MemoryMiB: 1 << 30}}, true},
		{"last slot", NodeStatus{Node: Node{Slots: 2}, Usage: NodeUsage{Sandboxes: 1}}, true},
		{"no slot", NodeStatus{Node: Node{Slots: 2}, Usage: NodeUsage{Sandboxes: 2}}, false},
		{"memory exactly", NodeStatus{Node: Node{MemoryMiB: 1024}, Usage: NodeUsage{MemoryMiB: 512}}, true},
		{"memory short", NodeStatus{Node: Node{MemoryMiB: 1024}, Usage: NodeUsage{MemoryMiB: 513}}, false},
		{"CPUs are not reserved", NodeStatus{Node: Node{CPUs: 2}, Usage: NodeUsage{CPUs: 64}}, true},
	} {
		if got := tc.n.Fits(r); got != tc.want {
			t.Errorf("%s: Fits = %v", tc.name, got)
		}
	}
	if (NodeStatus{Node: Node{State: NodeDraining}, Usage: NodeUsage{Sandboxes: 1}}).Drained() ||
		!(NodeStatus{Node: Node{State: NodeDraining}}).Drained() || (NodeStatus{Node: Node{State: NodeCordoned}}).Drained() {
		t.Error("Drained: only a draining node without sandboxes")
	}
}

// Fuzz: the node parsers never panic, and what they accept parses again to
// itself.
func FuzzParseNodeValues(f *testing.F) {
	for _, s := range []string{"all", "api", "node", "active", "dead", NewIncarnation().String(), "inc_", "spread", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseNodeRole(s); err == nil {
			if again, err := ParseNodeRole(string(r)); err != nil || again != r || string(r) != s {
				t.Fatalf("role %q: %q, then %q %v", s, r, again, err)
			}
		}
		if st, err := ParseNodeState(s); err == nil {
			if again, err := ParseNodeState(string(st)); err != nil || again != st || string(st) != s {
				t.Fatalf("state %q: %q, then %q %v", s, st, again, err)
			}
		}
		if i, err := ParseIncarnation(s); err == nil {
			if again, err := ParseIncarnation(i.String()); err != nil || again != i || i.String() != s {
				t.Fatalf("incarnation %q: %q, then %q %v", s, i, again, err)
			}
		}
		if p, err := ParsePlacementStrategy(s); err == nil {
			if again, err := ParsePlacementStrategy(string(p)); err != nil || again != p {
				t.Fatalf("placement %q: %q, then %q %v", s, p, again, err)
			}
		}
	})
}

func FuzzParseNodeLabel(f *testing.F) {
	for _, s := range []string{"zone=a", "example.com/gpu=true", "=", "a=", "a==b", "-a=b", strings.Repeat("a", 64) + "=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := ParseNodeLabel(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v, not ErrInvalid", s, err)
			}
			return
		}
		if k+"="+v != s || strings.ContainsAny(k+v, "= \x00") {
			t.Fatalf("%q parsed as %q=%q", s, k, v)
		}
		k2, v2, err := ParseNodeLabel(k + "=" + v)
		if err != nil || k2 != k || v2 != v {
			t.Fatalf("%q=%q does not parse again: %q=%q %v", k, v, k2, v2, err)
		}
		if _, err := ParseNodeLabels(map[string]string{k: v}); err != nil {
			t.Fatalf("ParseNodeLabel accepts %q, ParseNodeLabels does not: %v", s, err)
		}
	})
}

func FuzzParseNodeLabels(f *testing.F) {
	f.Add("zone", "a", "gpu", "true")
	f.Add("example.com/x", "", "a", "b")
	f.Add("", "", "x", "y z")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m := map[string]string{k1: v1, k2: v2}
		l, err := ParseNodeLabels(m)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || l != nil {
				t.Fatalf("%v: %v, %v", m, l, err)
			}
			return
		}
		if !maps.Equal(l, NodeLabels(m)) {
			t.Fatalf("%v parsed as %v", m, l)
		}
		again, err := ParseNodeLabels(l)
		if err != nil || !maps.Equal(again, l) {
			t.Fatalf("%v does not parse again: %v %v", l, again, err)
		}
		for k, v := range l {
			if k2, v2, err := ParseNodeLabel(k + "=" + v); err != nil || k2 != k || v2 != v {
				t.Fatalf("label %q=%q is not a KEY=VALUE: %v", k, v, err)
			}
		}
		if !l.Matches(l) || !l.Matches(nil) {
			t.Fatalf("%v does not match itself", l)
		}
	})
}

func FuzzParseAdvertiseURL(f *testing.F) {
	for _, s := range []string{"http://a:1", "https://node-1.internal:7443/", "http://a//", "http://[::1]:80/x/",
		"http://a/%2F", "http://a/?", "http://a#", "http://a/b%20c/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseAdvertiseURL(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || u != "" {
				t.Fatalf("%q: %q, %v", s, u, err)
			}
			return
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") || strings.HasSuffix(u, "/") ||
			strings.ContainsAny(u, "?#") {
			t.Fatalf("%q accepted as %q", s, u)
		}
		again, err := ParseAdvertiseURL(u)
		if err != nil || again != u {
			t.Fatalf("%q accepted as %q, which parses as %q, %v", s, u, again, err)
		}
	})
}

// TestGuestPids: one task per 256 KiB of memory, 64 to 1024.
func TestGuestPids(t *testing.T) {
	for _, tt := range []struct{ mem, want int }{
		{0, MinGuestPids}, {8, MinGuestPids}, {16, 64}, {32, 128}, {64, 256}, {100, 400},
		{255, 1020}, {256, 1024}, {512, 1024}, {MaxMemoryMiB, MaxGuestPids},
	} {
		if got := GuestPids(tt.mem); got != tt.want {
			t.Errorf("GuestPids(%d MiB) = %d, want %d", tt.mem, got, tt.want)
		}
	}
}

// TestNodeRoomPids: a node's pids budget bounds the sum of its sandboxes'
// host pids as its memory bounds their memory; 0 bounds nothing; Lacks
// gives the numbers of each bound that would be exceeded.
func TestNodeRoomPids(t *testing.T) {
	for _, tt := range []struct {
		name  string
		node  Node
		usage NodeUsage
		r     Resources
		lacks string
	}{
		{"fits", Node{PidsBudget: 2000}, NodeUsage{Pids: 768}, Resources{HostPids: 1232}, ""},
		{"one over", Node{PidsBudget: 2000}, NodeUsage{Pids: 768}, Resources{HostPids: 1233}, "pids 768 + 1233 of 2000"},
		{"full", Node{PidsBudget: 1088}, NodeUsage{Pids: 1088}, Resources{HostPids: 1}, "pids 1088 + 1 of 1088"},
		{"no budget", Node{}, NodeUsage{Pids: 1 << 30}, Resources{HostPids: 1 << 20}, ""},
		{"uncharged sandbox", Node{PidsBudget: 10}, NodeUsage{Pids: 10}, Resources{}, ""},
		{"memory and pids", Node{MemoryMiB: 1024, PidsBudget: 100}, NodeUsage{MemoryMiB: 1000, Pids: 50}, Resources{MemoryMiB: 32, HostPids: 51},
			"memory 1000 + 32 of 1024 MiB, pids 50 + 51 of 100"},
		{"slots", Node{Slots: 1, PidsBudget: 100}, NodeUsage{Sandboxes: 1}, Resources{HostPids: 1}, "sandboxes 1 of 1"},
	} {
		n := NodeStatus{Node: tt.node, Usage: tt.usage}
		if got := n.Lacks(tt.r); got != tt.lacks {
			t.Errorf("%s: Lacks = %q, want %q", tt.name, got, tt.lacks)
		}
		if got := n.Fits(tt.r); got != (tt.lacks == "") {
			t.Errorf("%s: Fits = %t", tt.name, got)
		}
	}
}

// TestFitsNodePids: one sandbox whose host pids alone exceed the node's
// budget is refused with ErrExceedsCapacity, the numbers in the message.
func TestFitsNodePids(t *testing.T) {
	for _, tt := range []struct {
		pids, budget int
		err          string
	}{
		{1088, 2000, ""},
		{2000, 2000, ""},
		{4352, 2000, "pids: the sandbox may hold 4352 host tasks, but this node's pids budget is 2000"},
		{4352, 0, ""},
	} {
		err := Resources{HostPids: tt.pids}.FitsNode(NodeCapacity{Pids: tt.budget})
		if tt.err == "" {
			if err != nil {
				t.Errorf("%d of %d: %v", tt.pids, tt.budget, err)
			}
			continue
		}
		if !errors.Is(err, ErrExceedsCapacity) || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%d of %d: %v, want ErrExceedsCapacity with %q", tt.pids, tt.budget, err, tt.err)
		}
	}
	if err := (Resources{CPUs: 1, MemoryMiB: 32, DiskMiB: 64, HostPids: -1}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative host pids: %v, want ErrInvalid", err)
	}
}
