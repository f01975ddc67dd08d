package sqlstore

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/model"
)

// Topics name what a change concerns, so that a watcher of one topic is
// woken only by the changes that may matter to it (store.Store's WatchNode,
// WatchBuilds). A change names any number of topics; topicAll concerns
// every watcher. Coarse watchers (Watch) are woken by every change.
const (
	// topicAll: every watcher (a cluster-wide change, or one whose reach
	// is not known).
	topicAll = "*"
	// topicBuilds: a template build row changed.
	topicBuilds = "builds"
	// topicNodePrefix + a node ID: an operation or sandbox placed on the
	// node (or the node's own row) changed.
	topicNodePrefix = "node:"
	// payloadNone is the NOTIFY payload of a change that names no topic:
	// it wakes coarse watchers only. (An empty payload, which a process
	// that sends no topics writes, wakes every watcher.)
	payloadNone = "-"
)

// nodeTopic is the topic of node's changes.
func nodeTopic(node model.NodeID) string { return topicNodePrefix + string(node) }

// maxPayload bounds the NOTIFY payload a change is sent as (PostgreSQL's
// limit is 8000 bytes): a change naming more topics is sent as topicAll.
const maxPayload = 4000

// change is what one committed write concerns. A change with no topics
// concerns nobody in particular: it wakes coarse watchers only.
type change struct {
	// scoped: the write said what it concerns (tx.concerns and its
	// kin); an unscoped write concerns every watcher.
	scoped bool
	topics []string
}

// add records topics (empty ones are ignored, duplicates dropped).
func (c *change) add(topics ...string) {
	c.scoped = true
	for _, t := range topics {
		if t != "" && !slices.Contains(c.topics, t) {
			c.topics = append(c.topics, t)
		}
	}
}

// all reports whether the change concerns every watcher.
func (c change) all() bool { return slices.Contains(c.topics, topicAll) }

// matches reports whether a watcher of topic ("" for a coarse watcher)
// is woken by the change.
func (c change) matches(topic string) bool {
	return topic == "" || c.all() || slices.Contains(c.topics, topic)
}

// payload is the change as a NOTIFY payload: its topics separated by
// spaces (payloadNone for none), or topicAll when they would not fit.
func (c change) payload() string {
	switch p := strings.Join(c.topics, " "); {
	case c.all() || len(p) > maxPayload:
		return topicAll
	case p == "":
		return payloadNone
	default:
		return p
	}
}

// parsePayload reads a NOTIFY payload written by payload. An empty one,
// which a process that sends no topics writes, concerns every watcher.
func parsePayload(p string) change {
	switch p {
	case "":
		return change{scoped: true, topics: []string{topicAll}}
	case payloadNone:
		return change{scoped: true}
	}
	var c change
	c.add(strings.Fields(p)...)
	return c
}

// subscriber is one watcher: its topic ("" for every change) and the stop
// of its context.AfterFunc.
type subscriber struct {
	topic string
	stop  func() bool
}

// broadcaster fans a coalesced "something changed" signal out to any number
// of subscribers. Each subscriber has its own channel with a buffer of one;
// sends never block, so a slow subscriber sees one pending wake-up however
// many changes happened.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan struct{}]subscriber
	closed bool
}

// newBroadcaster returns an empty broadcaster.
func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[chan struct{}]subscriber{}}
}

// Subscribe returns a channel that receives a value after each Broadcast
// or Notify (coalesced) and is closed when ctx ends or the broadcaster is
// closed. No goroutine is started: the channel is removed by a
// context.AfterFunc.
func (b *broadcaster) Subscribe(ctx context.Context) <-chan struct{} {
	return b.SubscribeTopic(ctx, "")
}

// SubscribeTopic is Subscribe for the changes that name topic or concern
// every watcher ("": every change).
func (b *broadcaster) SubscribeTopic(ctx context.Context, topic string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || ctx.Err() != nil {
		close(ch)
		return ch
	}
	b.subs[ch] = subscriber{topic: topic, stop: context.AfterFunc(ctx, func() { b.remove(ch) })}
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
func (b *broadcaster) Broadcast() { b.Notify(change{topics: []string{topicAll}}) }

// Notify wakes, without blocking, every subscriber that c matches.
func (b *broadcaster) Notify(c change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch, s := range b.subs {
		if !c.matches(s.topic) {
			continue
		}
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
	for ch, s := range b.subs {
		s.stop()
		delete(b.subs, ch)
		close(ch)
	}
}
