package agent

import (
	"sync"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// eventOverhead is the cost charged per event on top of its data, so that a
// process writing single bytes cannot fill memory with event headers.
const eventOverhead = 64

// eventLog is the bounded, append-only output buffer of one process. The
// process's pipe readers append; any number of HTTP readers read from it at
// their own pace, so a slow reader never blocks the process. When the kept
// events cost more than max, the oldest are dropped (never the newest one),
// and readers that ask for dropped events start at the oldest kept one.
type eventLog struct {
	mu      sync.Mutex
	events  []agentproto.Event // events[head:] are kept; their Seq are consecutive
	head    int
	cost    int
	max     int
	next    uint64        // Seq of the next event
	closed  bool          // the exit event has been appended
	changed chan struct{} // closed and replaced on every append
}

func newEventLog(maxCost int) *eventLog {
	return &eventLog{max: maxCost, next: 1, changed: make(chan struct{})}
}

func eventCost(ev *agentproto.Event) int { return len(ev.Data) + eventOverhead }

// append adds ev, assigning its Seq. Appending after the exit event is a
// programming error and is ignored.
func (l *eventLog) append(ev agentproto.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	ev.Seq = l.next
	l.next++
	l.events = append(l.events, ev)
	l.cost += eventCost(&ev)
	if ev.Type == agentproto.EventExit {
		l.closed = true
	}
	for l.cost > l.max && len(l.events)-l.head > 1 {
		l.cost -= eventCost(&l.events[l.head])
		l.events[l.head] = agentproto.Event{}
		l.head++
	}
	if l.head > 64 && l.head > len(l.events)/2 {
		n := copy(l.events, l.events[l.head:])
		clear(l.events[n:])
		l.events = l.events[:n]
		l.head = 0
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// read returns up to limit kept events with Seq > after (starting at the
// oldest kept event if those were dropped). done reports that the returned
// events end with the exit event, or that the exit event is at or before
// after: the reader has nothing more to wait for. Otherwise changed is closed
// when the next event arrives.
func (l *eventLog) read(after uint64, limit int) (evs []agentproto.Event, done bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.events[l.head:]
	start := 0
	if len(kept) > 0 && after >= kept[0].Seq {
		start = int(min(after-kept[0].Seq+1, uint64(len(kept))))
	}
	end := min(start+limit, len(kept))
	evs = append([]agentproto.Event(nil), kept[start:end]...)
	return evs, l.closed && end == len(kept), l.changed
}

// trimToLast drops every kept event but the newest (for an exited process:
// its exit event) and returns the cost it freed.
func (l *eventLog) trimToLast() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := len(l.events) - l.head
	if kept <= 1 {
		return 0
	}
	last := l.events[len(l.events)-1]
	before := l.cost
	clear(l.events)
	l.events = append(l.events[:0], last)
	l.head = 0
	l.cost = eventCost(&last)
	return before - l.cost
}

// size returns the cost of the kept events.
func (l *eventLog) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cost
}
