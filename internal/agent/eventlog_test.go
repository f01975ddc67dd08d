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
	l := newEventLog(1 << 20)
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte("a")})
	l.append(agentproto.Event{Type: agentproto.EventStderr, Data: []byte("b")})
	evs, done, _ := l.read(0, 100)
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 || done {
		t.Fatalf("read(0) = %+v, done=%v", evs, done)
	}
	evs, done, changed := l.read(2, 100)
	if len(evs) != 0 || done {
		t.Fatalf("read(2) = %+v, done=%v", evs, done)
	}
	l.append(exitEvent(0))
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
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte("late")})
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
	l := newEventLog(10 * (chunk + eventOverhead))
	for range 100 {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(chunk)})
	}
	if c := l.size(); c > 10*(chunk+eventOverhead) {
		t.Fatalf("cost %d over the limit", c)
	}
	evs, _, _ := l.read(0, 1000)
	if len(evs) != 10 || evs[0].Seq != 91 || evs[9].Seq != 100 {
		t.Fatalf("kept %d events, first %d", len(evs), evs[0].Seq)
	}
	// A reader asking for dropped events starts at the oldest kept one.
	evs, _, _ = l.read(5, 1000)
	if len(evs) == 0 || evs[0].Seq != 91 {
		t.Fatalf("read(5) starts at %v", evs)
	}
	evs, _, _ = l.read(95, 1000)
	if len(evs) != 5 || evs[0].Seq != 96 {
		t.Fatalf("read(95) = %d events from %d", len(evs), evs[0].Seq)
	}
	// One event bigger than the whole buffer is still kept (the newest is never dropped).
	l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(100 * chunk)})
	evs, _, _ = l.read(0, 1000)
	if len(evs) != 1 || evs[0].Seq != 101 {
		t.Fatalf("after a huge event: %d events", len(evs))
	}
	l.append(exitEvent(1))
	evs, done, _ := l.read(0, 1000)
	if !done || evs[len(evs)-1].Type != agentproto.EventExit {
		t.Fatalf("exit event not kept: %+v", evs)
	}
}

func TestEventLogConcurrentReaders(t *testing.T) {
	l := newEventLog(1 << 30)
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
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: []byte{byte(i)}})
	}
	l.append(exitEvent(0))
	wg.Wait()
}

func TestEventLogTrimToLast(t *testing.T) {
	l := newEventLog(1 << 20)
	for range 10 {
		l.append(agentproto.Event{Type: agentproto.EventStdout, Data: data(100)})
	}
	l.append(exitEvent(3))
	before := l.size()
	freed := l.trimToLast()
	if freed != 10*(100+eventOverhead) || l.size() != before-freed {
		t.Fatalf("freed %d of %d, size now %d", freed, before, l.size())
	}
	evs, done, _ := l.read(0, 100)
	if len(evs) != 1 || evs[0].Seq != 11 || evs[0].Type != agentproto.EventExit || !done {
		t.Fatalf("after trim: %+v done=%v", evs, done)
	}
	if l.trimToLast() != 0 {
		t.Fatal("second trim freed something")
	}
}
