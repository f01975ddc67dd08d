package nodebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// simRuntime is a runtime.Runtime that only records what a real one would
// do: Create and Start are instant, and the "guest agent" that DialAgent
// reaches is an in-process HTTP/2 handler answering GET /v1/info, so the
// real worker's create path (state, spec, create, start, agent handshake)
// runs unchanged.
type simRuntime struct {
	mu     sync.Mutex
	phases map[model.SandboxID]runtime.Phase

	agent *simAgent
}

func newSimRuntime(agent *simAgent) *simRuntime {
	return &simRuntime{phases: map[model.SandboxID]runtime.Phase{}, agent: agent}
}

func (r *simRuntime) Info() runtime.Info {
	return runtime.Info{
		Name:      string(environment.NameRunc),
		Version:   "simulated",
		Binary:    "/nonexistent/simulated-runc",
		Isolation: environment.IsolationSharedKernel,
		OOMScope:  environment.OOMKillsProcess,
	}
}

func (r *simRuntime) Create(_ context.Context, spec runtime.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch p, ok := r.phases[spec.ID]; {
	case !ok:
		r.phases[spec.ID] = runtime.PhaseCreated
	case p != runtime.PhaseCreated && p != runtime.PhaseRunning:
		return fmt.Errorf("simulated create of %s: it exists in phase %s", spec.ID, p)
	}
	return nil
}

func (r *simRuntime) Start(_ context.Context, id model.SandboxID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch p, ok := r.phases[id]; {
	case !ok:
		return fmt.Errorf("simulated start of %s: %w", id, runtime.ErrNotFound)
	case p == runtime.PhasePaused:
		return fmt.Errorf("simulated start of %s: it is paused", id)
	}
	r.phases[id] = runtime.PhaseRunning
	return nil
}

func (r *simRuntime) State(_ context.Context, id model.SandboxID) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.phases[id]
	if !ok {
		return runtime.Status{}, runtime.ErrNotFound
	}
	return runtime.Status{ID: id, Phase: p, Pid: 1}, nil
}

func (r *simRuntime) Stop(_ context.Context, id model.SandboxID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.phases[id]; !ok {
		return runtime.ErrNotFound
	}
	r.phases[id] = runtime.PhaseStopped
	return nil
}

func (r *simRuntime) Delete(_ context.Context, id model.SandboxID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.phases, id)
	return nil
}

func (r *simRuntime) List(context.Context) ([]model.SandboxID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]model.SandboxID, 0, len(r.phases))
	for id := range r.phases {
		ids = append(ids, id)
	}
	return ids, nil
}

func (r *simRuntime) DialAgent(ctx context.Context, id model.SandboxID) (net.Conn, error) {
	if st, err := r.State(ctx, id); err != nil || st.Phase != runtime.PhaseRunning {
		return nil, fmt.Errorf("simulated agent of %s: not running", id)
	}
	return r.agent.dial(ctx)
}

// simAgent serves every simulated sandbox's guest agent (GET /v1/info over
// unencrypted HTTP/2, as the real agent does) on in-memory connections.
type simAgent struct {
	srv   *http.Server
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newSimAgent() *simAgent {
	a := &simAgent{conns: make(chan net.Conn), done: make(chan struct{})}
	started := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(agentproto.Info{AgentVersion: "simulated", Protocol: agentproto.ProtocolVersion, Pid: 1, StartedAt: started})
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	a.srv = &http.Server{Handler: mux, Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(pipeListener{a}) }()
	return a
}

func (a *simAgent) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case a.conns <- server:
		return client, nil
	case <-a.done:
		return nil, errors.New("simulated agent: closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *simAgent) Close() error {
	a.once.Do(func() { close(a.done) })
	return a.srv.Close()
}

// pipeListener hands the server the in-memory connections of dial.
type pipeListener struct{ a *simAgent }

func (l pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.a.conns:
		return c, nil
	case <-l.a.done:
		return nil, net.ErrClosed
	}
}

func (l pipeListener) Close() error {
	l.a.once.Do(func() { close(l.a.done) })
	return nil
}

func (l pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "simulated-agent" }
