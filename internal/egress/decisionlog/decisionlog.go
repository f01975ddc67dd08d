// Package decisionlog is the bounded, in-memory log of one sandbox's egress decisions: every
// DNS answer or refusal and every connection allowed or denied, in order, with a sequence
// number. Readers page with Since and follow with Wait. When more events arrive than the log
// holds, the oldest are overwritten and a reader that asks for them learns how many it missed
// (Since's dropped count): the bound is visible, never silent.
package decisionlog

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Kinds of event.
const (
	KindDNS     = "dns"     // a query answered or refused by the resolver
	KindConnect = "connect" // a TCP connection on a port other than 80/443, or a TLS relay
	KindHTTP    = "http"    // an HTTP request (plain, or inside intercepted TLS)
	KindTLS     = "tls"     // a TLS connection judged by its SNI
	KindCut     = "cut"     // an open connection closed because the policy changed
)

// Event is one decision.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Host    string    `json:"host,omitempty"`
	Addr    string    `json:"addr,omitempty"`
	Port    uint16    `json:"port,omitempty"`
	Allowed bool      `json:"allowed"`
	Rule    string    `json:"rule"`
	Reason  string    `json:"reason"`
}

// ErrClosed is returned by Wait once the log is closed (its sandbox is gone).
var ErrClosed = errors.New("decision log closed")

// DefaultCapacity is the capacity New uses for a non-positive one.
const DefaultCapacity = 4096

// Log is a ring of events. It is safe for concurrent use.
type Log struct {
	mu     sync.Mutex
	ring   []Event
	first  uint64 // Seq of the log's first event
	next   uint64 // Seq of the next event
	notify chan struct{}
	closed bool
	// observe, if set, is told of every event appended (metrics).
	observe func(Event)
}

// New returns an empty Log holding at most capacity events.
func New(capacity int) *Log { return NewObserved(capacity, nil) }

// NewObserved is New with observe (nil: none) called with every event
// appended, after it is in the log.
func NewObserved(capacity int, observe func(Event)) *Log {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	base := uint64(time.Now().UnixMicro())
	return &Log{ring: make([]Event, capacity), first: base + 1, next: base + 1, notify: make(chan struct{}), observe: observe}
}

// Append adds e, assigning its Seq (and its Time when zero), and returns it.
func (l *Log) Append(e Event) Event {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	l.mu.Lock()
	e.Seq = l.next
	l.next++
	l.ring[e.Seq%uint64(len(l.ring))] = e
	ch := l.notify
	l.notify = make(chan struct{})
	l.mu.Unlock()
	close(ch)
	if l.observe != nil {
		l.observe(e)
	}
	return e
}

// Since returns the events with Seq > after that the log still holds, oldest first, and how
// many events after `after` were already overwritten.
func (l *Log) Since(after uint64) (events []Event, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.next - 1
	if l.next == l.first || after >= last {
		return nil, 0
	}
	capacity := uint64(len(l.ring))
	first := max(after+1, l.first) // a number from before this log: from its start
	if oldest := max(l.first, l.next-min(capacity, l.next-l.first)); first < oldest {
		dropped = oldest - first
		first = oldest
	}
	events = make([]Event, 0, last-first+1)
	for s := first; s <= last; s++ {
		events = append(events, l.ring[s%capacity])
	}
	return events, dropped
}

// Last is the Seq of the newest event, 0 when there is none.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next == l.first {
		return 0
	}
	return l.next - 1
}

// Wait returns nil once an event with Seq > after exists, ctx.Err() when ctx ends first, and
// ErrClosed when the log is closed.
func (l *Log) Wait(ctx context.Context, after uint64) error {
	for {
		l.mu.Lock()
		if l.next > l.first && l.next-1 > after {
			l.mu.Unlock()
			return nil
		}
		if l.closed {
			l.mu.Unlock()
			return ErrClosed
		}
		ch := l.notify
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close wakes every waiter; later Waits that would block return ErrClosed. Events stay
// readable.
func (l *Log) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	ch := l.notify
	l.notify = make(chan struct{})
	l.mu.Unlock()
	close(ch)
}
