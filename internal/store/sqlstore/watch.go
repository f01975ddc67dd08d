package sqlstore

import (
	"context"
	"sync"
)

// broadcaster fans a coalesced "something changed" signal out to any number
// of subscribers. Each subscriber has its own channel with a buffer of one;
// sends never block, so a slow subscriber sees one pending wake-up however
// many changes happened.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan struct{}]func() bool // channel → stop of its context.AfterFunc
	closed bool
}

// newBroadcaster returns an empty broadcaster.
func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[chan struct{}]func() bool{}}
}

// Subscribe returns a channel that receives a value after each Broadcast
// (coalesced) and is closed when ctx ends or the broadcaster is closed. No
// goroutine is started: the channel is removed by a context.AfterFunc.
func (b *broadcaster) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || ctx.Err() != nil {
		close(ch)
		return ch
	}
	b.subs[ch] = context.AfterFunc(ctx, func() { b.remove(ch) })
	return ch
}

func (b *broadcaster) remove(ch chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

// Broadcast wakes every subscriber without blocking.
func (b *broadcaster) Broadcast() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Len returns the number of live subscribers.
func (b *broadcaster) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Close closes every subscriber's channel; later Subscribe calls return a
// closed channel.
func (b *broadcaster) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for ch, stop := range b.subs {
		stop()
		delete(b.subs, ch)
		close(ch)
	}
}
