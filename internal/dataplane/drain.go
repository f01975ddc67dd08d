package dataplane

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// drainRetryMS is the reconnect delay advised to clients whose stream is
// ended by a drain.
const drainRetryMS = 1000

// drainState is the data plane's graceful shutdown: once draining, new
// attachments are refused (503 draining) while open streams go on; at the
// deadline the streams still open end with a reconnect event.
type drainState struct {
	mu       sync.Mutex
	draining bool
	end      context.Context // cancelled at the drain deadline
	cancel   context.CancelFunc
	streams  int           // open streams
	idle     chan struct{} // closed when streams drops to 0; nil while none is open
}

func (s *drainState) init() {
	s.end, s.cancel = context.WithCancel(context.Background())
}

// refuse writes 503 and reports true while draining.
func (s *drainState) refuse(w http.ResponseWriter) bool {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		w.Header().Set("Retry-After", "1")
		writeError(w, apiv1.CodeDraining, "this server is shutting down; reconnect to another replica or after its restart")
	}
	return draining
}

// streamContext returns the context of one stream: ctx, also cancelled at
// the drain deadline. done must be called when the stream ends.
func (s *drainState) streamContext(ctx context.Context) (context.Context, func()) {
	s.mu.Lock()
	if s.streams++; s.streams == 1 {
		s.idle = make(chan struct{})
	}
	s.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.end, cancel)
	return sctx, func() {
		stop()
		cancel()
		s.mu.Lock()
		if s.streams--; s.streams == 0 {
			close(s.idle)
			s.idle = nil
		}
		s.mu.Unlock()
	}
}

// ended reports whether the drain deadline has passed (a stream that ends
// then ends because of it).
func (s *drainState) ended() bool { return s.end.Err() != nil }

// Draining reports whether Drain has been called (readiness fails then).
func (d *DataPlane) Draining() bool {
	d.drain.mu.Lock()
	defer d.drain.mu.Unlock()
	return d.drain.draining
}

// StartDrain refuses new attachments from now on; open streams continue.
func (d *DataPlane) StartDrain() {
	d.drain.mu.Lock()
	d.drain.draining = true
	d.drain.mu.Unlock()
}

// Drain starts draining and waits until every open stream has ended or ctx
// ends; then it ends the remaining streams with a reconnect event (clients
// resume with Last-Event-ID and lose nothing) and waits up to a few seconds
// for them to write it.
func (d *DataPlane) Drain(ctx context.Context) {
	d.StartDrain()
	if d.waitStreams(ctx) {
		// Nothing is open; a stream that still slips in (its request got
		// past the draining check a moment before) ends at once with a
		// reconnect event.
		d.drain.cancel()
		return
	}
	d.log.Info("shutdown grace over; ending open streams with a reconnect event", "streams", d.openStreams())
	d.drain.cancel()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if !d.waitStreams(wctx) {
		d.log.Warn("some streams did not end after the reconnect event", "streams", d.openStreams())
	}
}

func (d *DataPlane) openStreams() int {
	d.drain.mu.Lock()
	defer d.drain.mu.Unlock()
	return d.drain.streams
}

// waitStreams waits until no stream is open (true) or ctx ends (false).
func (d *DataPlane) waitStreams(ctx context.Context) bool {
	for {
		d.drain.mu.Lock()
		idle := d.drain.idle
		d.drain.mu.Unlock()
		if idle == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-idle:
			// Streams may have opened again since; look once more.
		}
	}
}
