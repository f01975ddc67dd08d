package envd

import (
	"fmt"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestTags(t *testing.T) {
	tg := newTags()
	tg.set("sb_a", "proc_1", "web")
	tg.set("sb_a", "proc_2", "web")
	tg.set("sb_a", "proc_3", "db")
	tg.set("sb_b", "proc_1", "other")
	if got, ok := tg.get("sb_a", "proc_3"); !ok || got != "db" {
		t.Fatalf("get = %q, %v", got, ok)
	}
	got := tg.find("sb_a", "web")
	slices.Sort(got)
	if !slices.Equal(got, []model.ProcessID{"proc_1", "proc_2"}) {
		t.Fatalf("find web = %v", got)
	}
	tg.keep("sb_a", map[model.ProcessID]bool{"proc_2": true})
	if _, ok := tg.get("sb_a", "proc_1"); ok {
		t.Fatal("proc_1 kept after it was gone")
	}
	if _, ok := tg.get("sb_b", "proc_1"); !ok {
		t.Fatal("keep of sb_a dropped sb_b's tag")
	}
	if tg.n != 2 {
		t.Fatalf("n = %d, want 2", tg.n)
	}
	for i := range maxTags + 10 {
		tg.set("sb_c", model.ProcessID(fmt.Sprintf("proc_%d", i)), "x")
	}
	if tg.n > maxTags {
		t.Fatalf("n = %d over the bound %d", tg.n, maxTags)
	}
}
