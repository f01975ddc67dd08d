package storetest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func countTests() []namedTest {
	return []namedTest{
		{"CountSandboxes", testCountSandboxes},
	}
}

func testCountSandboxes(e *env) {
	t := e.t
	got, err := e.s.CountSandboxes(e.ctx)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("CountSandboxes of an empty store = %+v", got)
	}
	a := e.project()
	tpl := e.template()
	// The pool's first: their creates are claimed as the next operations.
	p := e.pool("python", 2)
	_ = e.poolSandbox(p, tpl.Digest, true)
	_ = e.poolSandbox(p, tpl.Digest, true)
	_ = e.poolSandbox(p, tpl.Digest, false)
	_, _ = e.sandbox(a.ID, tpl.Digest, nil) // pending, not placed
	withRunc := func(sb *model.Sandbox) { sb.Runtime = "runc" }
	_ = e.sandboxWith(a.ID, tpl.Digest, withRunc)
	_ = e.sandboxWith(a.ID, tpl.Digest, withRunc)
	gone, _ := e.sandbox(a.ID, tpl.Digest, nil)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: gone.ID, Operation: e.deleteOp(gone), Now: e.now()})
	must(t, err)
	// A claimed pool sandbox is its project's: it leaves the pool's count.
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, a.ID))
	must(t, err)

	got, err = e.s.CountSandboxes(e.ctx)
	must(t, err)
	var lines []string
	for _, c := range got {
		lines = append(lines, fmt.Sprintf("%s/%s/%s=%d", c.State, c.Runtime, c.Pool, c.N))
	}
	slices.Sort(lines)
	// The pool's sandboxes were not placed by a controller here: no runtime.
	counts := map[string]int{}
	for _, c := range got {
		if c.N <= 0 {
			t.Fatalf("CountSandboxes row with count %d: %+v", c.N, c)
		}
		counts[fmt.Sprintf("%s/%s/%s", c.State, c.Runtime, c.Pool)] += c.N
	}
	expect := map[string]int{
		"pending//":                       1,
		"pending/runc/":                   2,
		"deleting//":                      1,
		fmt.Sprintf("running//%s", p.ID):  1,
		fmt.Sprintf("creating//%s", p.ID): 1,
		"running//":                       1, // the claimed one
	}
	if fmt.Sprint(counts) != fmt.Sprint(expect) {
		t.Fatalf("CountSandboxes = %s\nwant %v", strings.Join(lines, " "), expect)
	}
}
