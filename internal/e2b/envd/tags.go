package envd

import (
	"sync"

	"github.com/airlockdev/airlock/internal/model"
)

// maxTags bounds the tag table; at the bound it is emptied (rare: entries
// go when List sees their process gone).
const maxTags = 4096

// tags remembers the tag E2B's Start gave a process: Airlock's processes
// have none. The table is this server's memory only: a tag is not seen
// through another replica, nor after a restart. Safe for concurrent use.
type tags struct {
	mu sync.Mutex
	n  int
	by map[model.SandboxID]map[model.ProcessID]string
}

func newTags() *tags {
	return &tags{by: make(map[model.SandboxID]map[model.ProcessID]string)}
}

func (t *tags) set(sb model.SandboxID, p model.ProcessID, tag string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n >= maxTags {
		clear(t.by)
		t.n = 0
	}
	m := t.by[sb]
	if m == nil {
		m = make(map[model.ProcessID]string)
		t.by[sb] = m
	}
	if _, ok := m[p]; !ok {
		t.n++
	}
	m[p] = tag
}

func (t *tags) get(sb model.SandboxID, p model.ProcessID) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tag, ok := t.by[sb][p]
	return tag, ok
}

// find returns the processes of sb tagged tag.
func (t *tags) find(sb model.SandboxID, tag string) []model.ProcessID {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []model.ProcessID
	for p, tg := range t.by[sb] {
		if tg == tag {
			out = append(out, p)
		}
	}
	return out
}

// keep forgets the tags of sb's processes that live does not hold.
func (t *tags) keep(sb model.SandboxID, live map[model.ProcessID]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.by[sb] {
		if !live[p] {
			delete(t.by[sb], p)
			t.n--
		}
	}
	if len(t.by[sb]) == 0 {
		delete(t.by, sb)
	}
}
