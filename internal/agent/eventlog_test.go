package agent

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
)

func data(n int) []byte { return bytes.Repeat([]byte("x"), n) }

func exitEvent(code int) agentproto.Event {
	return agentproto.Event{Type: agentproto.EventExit, ExitCode: &code}
}

func TestEventLogSeqAndRead(t *testing.T) {
	l := newEventLog(1<<20, nil)
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte("a")}, nil)
	l.append(agentproto.Event{Type: agentproto.EventStderr, Data: []byte("b")}, nil)
	evs, done, _ := l.read(0, 100)
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 || done {
		t.Fatalf("read(0) = %+v, done=%v", evs, done)
	}
	evs, done, changed := l.read(2, 100)
	if len(evs) != 0 || done {
		t.Fatalf("read(2) = %+v, done=%v", evs, done)
	}
	l.append(exitEvent(0), nil)
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal("changed not closed after append")
	}
	evs, done, _ = l.read(2, 100)
	if len(evs) != 1 || evs[0].Seq != 3 || evs[0].Type != agentproto.EventExit || !done {
		t.Fatalf("read(2) after exit = %+v, done=%v", evs, done)
	}
	// After the exit: nothing more, done.
	if evs, done, _ := l.read(3, 100); len(evs) != 0 || !done {
		t.Fatalf("read(3) = %+v, done=%v", evs, done)
	}
	if evs, done, _ := l.read(1000, 100); len(evs) != 0 || !done {
		t.Fatalf("read(1000) = %+v, done=%v", evs, done)
	}
	// Appending after the exit is ignored.
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte("late")}, nil)
	if evs, _, _ := l.read(0, 100); len(evs) != 3 {
		t.Fatalf("events after late append: %d", len(evs))
	}
	// limit
	if evs, done, _ := l.read(0, 2); len(evs) != 2 || done {
		t.Fatalf("read(0, limit 2) = %d events, done=%v", len(evs), done)
	}
}

func TestEventLogDropsOldest(t *testing.T) {
	const chunk = 1000
	l := newEventLog(10*(chunk+eventOverhead), nil)
	for range 100 {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(chunk)}, nil)
	}
	if c := l.size(); c > 10*(chunk+eventOverhead) {
		t.Fatalf("cost %d over the limit", c)
	}
	evs, _, _ := l.read(0, 1000)
	if len(evs) != 11 || evs[1].Seq != 91 || evs[10].Seq != 100 {
		t.Fatalf("kept %d events, first %d", len(evs), evs[1].Seq)
	}
	// A reader asking for dropped events gets a gap, then the oldest kept one.
	want := agentproto.Gap{Events: 90, StdoutBytes: 90 * chunk, Exact: true}
	if g := evs[0]; g.Type != agentproto.EventGap || g.Seq != 90 || *g.Gap != want {
		t.Fatalf("read(0) starts with %+v (gap %+v), want gap %+v", g, g.Gap, want)
	}
	evs, _, _ = l.read(5, 1000)
	want = agentproto.Gap{Events: 85, StdoutBytes: 85 * chunk, Exact: true}
	if len(evs) < 2 || evs[0].Type != agentproto.EventGap || *evs[0].Gap != want || evs[1].Seq != 91 {
		t.Fatalf("read(5) = %+v", evs[:2])
	}
	evs, _, _ = l.read(95, 1000)
	if len(evs) != 5 || evs[0].Seq != 96 {
		t.Fatalf("read(95) = %d events from %d", len(evs), evs[0].Seq)
	}
	// One event bigger than the whole buffer is still kept (the newest is never dropped).
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(100 * chunk)}, nil)
	evs, _, _ = l.read(0, 1000)
	if len(evs) != 3 || evs[1].Seq != 100 || evs[2].Seq != 101 {
		t.Fatalf("after a huge event: %d events", len(evs))
	}
	l.append(exitEvent(1), nil)
	evs, done, _ := l.read(0, 1000)
	if !done || evs[len(evs)-1].Type != agentproto.EventExit {
		t.Fatalf("exit event not kept: %+v", evs)
	}
}

func TestEventLogConcurrentReaders(t *testing.T) {
	l := newEventLog(1<<30, nil)
	const n = 2000
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after uint64
			for {
				evs, done, changed := l.read(after, 7)
				for _, ev := range evs {
					if ev.Seq != after+1 {
						t.Errorf("reader %d: seq %d after %d", r, ev.Seq, after)
						return
					}
					after = ev.Seq
				}
				if done {
					if after != n+1 {
						t.Errorf("reader %d ended at %d", r, after)
					}
					return
				}
				if len(evs) == 0 {
					<-changed
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte{byte(i)}}, nil)
	}
	l.append(exitEvent(0), nil)
	wg.Wait()
}

func TestEventLogTrimToLast(t *testing.T) {
	l := newEventLog(1<<20, nil)
	for range 10 {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(100)}, nil)
	}
	l.append(exitEvent(3), nil)
	before := l.size()
	freed := l.trimToLast()
	if freed != 10*(100+eventOverhead) || l.size() != before-freed {
		t.Fatalf("freed %d of %d, size now %d", freed, before, l.size())
	}
	evs, done, _ := l.read(10, 100)
	if len(evs) != 1 || evs[0].Seq != 11 || evs[0].Type != agentproto.EventExit || !done {
		t.Fatalf("after trim: %+v done=%v", evs, done)
	}
	if l.trimToLast() != 0 {
		t.Fatal("second trim freed something")
	}
}

func TestEventLogBackPressure(t *testing.T) {
	const chunk = 1000
	l := newEventLog(4*(chunk+eventOverhead), nil)
	cur := l.attach(0)
	for range 4 {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(chunk)}, nil)
	}
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(chunk)}, nil)
	}()
	select {
	case <-appended:
		t.Fatal("append into a full log did not wait for the attached reader")
	case <-time.After(100 * time.Millisecond):
	}
	l.advance(cur, 1) // the reader took event 1: it may be dropped now
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("append still waiting after the reader advanced")
	}
	evs, _, _ := l.read(1, 100)
	if len(evs) != 4 || evs[0].Seq != 2 || evs[3].Seq != 5 {
		t.Fatalf("read(1) = %d events from %d", len(evs), evs[0].Seq)
	}
	// A detached reader no longer holds writers back.
	go func() {
		for range 10 {
			l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(chunk)}, nil)
		}
		l.append(exitEvent(0), nil)
	}()
	time.Sleep(50 * time.Millisecond)
	l.detach(cur)
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, done, _ := l.read(1, 100)
		if done {
			if evs[0].Type != agentproto.EventGap || evs[0].Gap.StdoutBytes == 0 || !evs[0].Gap.Exact {
				t.Fatalf("after detach and overflow: first event %+v", evs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writer blocked after the reader detached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEventLogStopUnblocksWriter(t *testing.T) {
	l := newEventLog(2*(10+eventOverhead), nil)
	l.attach(0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(10)}, stop)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not unblock the writer")
	}
}

func TestEventLogSharedBudget(t *testing.T) {
	b := &budget{max: 200 << 10}
	a := newEventLog(1<<30, b)
	c := newEventLog(1<<30, b)
	for range 100 {
		a.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(10 << 10)}, nil)
		c.append(agentproto.Event{Type: agentproto.EventStderr, Data: data(10 << 10)}, nil)
	}
	if used := a.size() + c.size(); used > b.max+2*(10<<10+eventOverhead) {
		t.Fatalf("two logs hold %d bytes, budget %d", used, b.max)
	}
	a.release()
	c.release()
	if b.used != 0 {
		t.Fatalf("budget used %d after release", b.used)
	}
}

func TestDropIndexForgets(t *testing.T) {
	var d dropIndex
	n := uint64(0)
	for d.first <= 1 {
		n++
		d.add(&agentproto.Event{Seq: n, Type: agentproto.EventStdout, Data: data(300)})
	}
	g := d.gap(0, n+1)
	if g.Exact || g.Events != n || g.StdoutBytes == 0 || g.StdoutBytes >= n*300 {
		t.Fatalf("gap after forgetting = %+v (n=%d)", g, n)
	}
	g = d.gap(n-1, n+1)
	if !g.Exact || g.Events != 1 || g.StdoutBytes != 300 {
		t.Fatalf("recent gap = %+v", g)
	}
}
