package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/eventstream"
)

// The live sandbox list (GET /v1/watch/sandboxes): what the web console's
// sandbox list shows, without polling.
const (
	// watchMinGap is the shortest time between two list events: changes
	// are coalesced to at most about four events a second.
	watchMinGap = 250 * time.Millisecond
	// watchKeepalive is how long a stream stays silent before a comment.
	watchKeepalive = 15 * time.Second
	// watchPoll reads the list even without a change notice (a change
	// another replica made where the store does not notify across
	// processes).
	watchPoll = 5 * time.Second
	// watchMaxAge ends a stream (with a reconnect event): the client
	// opens it again and authenticates anew, so a revoked key stops
	// getting the list within this time.
	watchMaxAge = 10 * time.Minute
	// watchRetryMillis is the reconnect delay the final event asks for.
	watchRetryMillis = 1000
)

// watchSandboxes: GET /v1/watch/sandboxes?<the filters of GET
// /v1/sandboxes> → text/event-stream of sandboxes events, each with the
// body GET /v1/sandboxes would answer: one at once, then one whenever
// that body changed.
func (a *API) watchSandboxes(w http.ResponseWriter, r *http.Request, p principal) {
	a.streamSandboxList(w, r, p, watchTiming{minGap: watchMinGap, keepalive: watchKeepalive, poll: watchPoll, maxAge: watchMaxAge})
}

// watchTiming is the pace of a sandbox list stream, and how long it
// lasts at most.
type watchTiming struct{ minGap, keepalive, poll, maxAge time.Duration }

func (a *API) streamSandboxList(w http.ResponseWriter, r *http.Request, p principal, tm watchTiming) {
	q, err := parseSandboxQuery(p.project, r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	release, err := a.acquireWatch(p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer release()
	ctx := r.Context()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := a.cfg.Store.Watch(wctx) // before the first read: no change slips between
	read := func() ([]byte, error) {
		out, err := a.sandboxList(ctx, q)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
	body, err := read()
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// The stream lives as long as the tab: its later reads are not
	// recorded under the request's span (one endless trace otherwise).
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	sse := eventstream.Start(w)
	send := func(b []byte) error {
		if _, err := fmt.Fprintf(sse, "event: %s\ndata: %s\n\n", apiv1.EventSandboxes, b); err != nil {
			return err
		}
		return sse.Flush()
	}
	if err := send(body); err != nil {
		return
	}
	keepalive := time.NewTicker(tm.keepalive)
	defer keepalive.Stop()
	poll := time.NewTicker(tm.poll)
	defer poll.Stop()
	end := time.NewTimer(tm.maxAge)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			// An EventSource opens the stream again by itself.
			_, _ = fmt.Fprintf(sse, "retry: %d\nevent: %s\ndata: {}\n\n", watchRetryMillis, apiv1.EventReconnect)
			_ = sse.Flush()
			return
		case <-keepalive.C:
			if err := sse.Comment("keepalive"); err != nil {
				return
			}
			continue
		case <-changed:
		case <-poll.C:
		}
		if a.cfg.Ready != nil {
			// A server that is shutting down ends the stream at once (the
			// client opens it again) rather than holding its drain.
			if err := a.cfg.Ready(ctx); err != nil {
				return
			}
		}
		next, err := read()
		if err != nil {
			a.log.DebugContext(ctx, "sandbox watch ends", "err", err)
			return
		}
		if !bytes.Equal(next, body) {
			if err := send(next); err != nil {
				return
			}
			body = next
			keepalive.Reset(tm.keepalive)
		}
		// Coalesce: what changes during the gap is read once after it.
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			end.Reset(0) // the top of the loop ends the stream
		case <-time.After(tm.minGap):
		}
	}
}
