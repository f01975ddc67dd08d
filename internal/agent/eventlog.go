package agent

import (
	"sync"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// eventOverhead is the cost charged per event on top of its data, so that a
// process writing single bytes cannot fill memory with event headers.
const eventOverhead = 64

// minKeepBytes is what one process may always buffer, whatever the other
// processes of the sandbox hold of the shared budget.
const minKeepBytes = 64 << 10

// eventLog is the bounded, append-only output buffer of one process. The
// process's pipe readers append; any number of output streams read from it,
// each through a cursor. Flow control:
//
//   - While cursors are attached, an event that some cursor has not passed
//     is never dropped: a full log makes append wait (back-pressure to the
//     process, whose pipe fills and blocks its writes) until the slowest
//     cursor advances or detaches.
//   - Events every attached cursor has passed are kept for resumes while
//     they fit and dropped oldest first when space is needed.
//   - Without cursors, a full log drops its oldest events. Their sizes go
//     into a drop index, so the next reader that asks for them gets an
//     explicit gap event saying how many events and bytes it missed.
//
// The newest event is never dropped.
type eventLog struct {
	mu      sync.Mutex
	events  []agentproto.Event // events[head:] are kept; their Seq are consecutive
	head    int
	cost    int
	max     int
	budget  *budget // shared by the processes of one sandbox; may be nil
	next    uint64  // Seq of the next event
	closed  bool    // the exit event has been appended
	changed chan struct{}
	space   chan struct{} // closed and replaced when cursors advance or detach
	cursors map[*cursor]struct{}
	dropped dropIndex
}

// cursor is one output stream's position: the Seq of the last event it wrote.
type cursor struct{ pos uint64 }

func newEventLog(maxCost int, b *budget) *eventLog {
	return &eventLog{
		max: maxCost, budget: b, next: 1,
		changed: make(chan struct{}), space: make(chan struct{}),
		cursors: map[*cursor]struct{}{},
	}
}

func eventCost(ev *agentproto.Event) int { return len(ev.Data) + eventOverhead }

// full reports whether an event of cost c does not fit.
func (l *eventLog) full(c int) bool {
	if l.cost+c > l.max {
		return true
	}
	return l.cost+c > minKeepBytes && !l.budget.fits(c)
}

// droppableLocked reports whether the oldest kept event may be dropped: it
// is not the newest, and every attached cursor has passed it.
func (l *eventLog) droppableLocked() bool {
	if len(l.events)-l.head <= 1 {
		return false
	}
	seq := l.events[l.head].Seq
	for c := range l.cursors {
		if c.pos < seq {
			return false
		}
	}
	return true
}

func (l *eventLog) dropOldestLocked() {
	ev := &l.events[l.head]
	l.dropped.add(ev)
	c := eventCost(ev)
	l.cost -= c
	l.budget.release(c)
	*ev = agentproto.Event{}
	l.head++
	if l.head > 64 && l.head > len(l.events)/2 {
		n := copy(l.events, l.events[l.head:])
		clear(l.events[n:])
		l.events = l.events[:n]
		l.head = 0
	}
}

// append adds ev, assigning its Seq. If the log is full and an attached
// cursor still needs its oldest event, append waits until space is made or
// stop is closed; then the oldest events are dropped regardless (the slow
// readers get a gap). Appending after the exit event is ignored.
func (l *eventLog) append(ev agentproto.Event, stop <-chan struct{}) {
	c := eventCost(&ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for l.full(c) && len(l.events) > l.head {
		if l.droppableLocked() {
			l.dropOldestLocked()
			continue
		}
		if len(l.events)-l.head <= 1 {
			break // the newest is kept; go over the bound by one event
		}
		space := l.space
		l.mu.Unlock()
		select {
		case <-space:
			l.mu.Lock()
		case <-stop:
			l.mu.Lock()
			for l.full(c) && len(l.events)-l.head > 1 {
				l.dropOldestLocked()
			}
		}
		if l.closed {
			return
		}
	}
	ev.Seq = l.next
	l.next++
	l.events = append(l.events, ev)
	l.cost += c
	l.budget.take(c)
	if ev.Type == agentproto.EventExit {
		l.closed = true
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// attach registers a reader that has seen everything up to Seq after.
func (l *eventLog) attach(after uint64) *cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &cursor{pos: after}
	l.cursors[c] = struct{}{}
	return c
}

// advance records that c has written everything up to Seq pos.
func (l *eventLog) advance(c *cursor, pos uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pos > c.pos {
		c.pos = pos
		l.wakeWritersLocked()
	}
}

// detach unregisters c; it no longer holds writers back.
func (l *eventLog) detach(c *cursor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cursors, c)
	l.wakeWritersLocked()
}

func (l *eventLog) wakeWritersLocked() {
	close(l.space)
	l.space = make(chan struct{})
}

// cursorCount returns how many readers are attached.
func (l *eventLog) cursorCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cursors)
}

// read returns up to limit events with Seq > after. If events after it were
// dropped, the first returned event is a gap event (Seq: the last dropped
// one) describing them. done reports that the returned events end with the
// exit event, or that the exit event is at or before after: the reader has
// nothing more to wait for. Otherwise changed is closed when the next event
// arrives.
func (l *eventLog) read(after uint64, limit int) (evs []agentproto.Event, done bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.events[l.head:]
	start := 0
	if len(kept) > 0 {
		first := kept[0].Seq
		if after+1 < first {
			g := l.dropped.gap(after, first)
			evs = append(evs, agentproto.Event{Seq: first - 1, Type: agentproto.EventGap, Gap: &g})
			limit--
		} else {
			start = int(min(after-first+1, uint64(len(kept))))
		}
	}
	end := min(start+max(limit, 0), len(kept))
	evs = append(evs, kept[start:end]...)
	return evs, l.closed && end == len(kept), l.changed
}

// trimToLast drops every kept event but the newest (for an exited process:
// its exit event) and returns the cost it freed.
func (l *eventLog) trimToLast() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.cost
	for len(l.events)-l.head > 1 {
		l.dropOldestLocked()
	}
	return before - l.cost
}

// release gives the log's cost back to the shared budget (the record is
// being forgotten).
func (l *eventLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.budget.release(l.cost)
	l.cost = 0
	clear(l.events)
	l.events, l.head = nil, 0
}

// size returns the cost of the kept events.
func (l *eventLog) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cost
}

// budget is the output memory shared by the processes of one agent (one
// sandbox). A nil budget is unlimited.
type budget struct {
	mu   sync.Mutex
	used int
	max  int
}

func (b *budget) fits(c int) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used+c <= b.max
}

func (b *budget) take(c int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.used += c
	b.mu.Unlock()
}

func (b *budget) release(c int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.used -= c
	b.mu.Unlock()
}
