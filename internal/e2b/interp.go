package e2b

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/codeinterp"
	"github.com/airlockdev/airlock/internal/model"
)

// InterpreterPath is where the code-interpreter template installs its
// server (templates/code-interpreter).
const InterpreterPath model.GuestPath = codeinterp.GuestCommand

// interpreterStartTimeout bounds how long a first request waits for the
// code interpreter to listen.
const interpreterStartTimeout = 30 * time.Second

// maxInterpreters bounds the set of sandboxes known to run one; at the
// bound it is emptied (each is then probed once more).
const maxInterpreters = 4096

// interpreters starts the code interpreter of a sandbox on first use: a
// template cannot start services by itself, so the gateway starts the
// template's server through Airlock's commands API the first time its
// port is asked for, and again after it went away. A sandbox is known to
// run one as of a version of its record (UpdatedAt): any change since —
// a suspend and wake, which on a filesystem-only suspend ends every
// process — is probed again first.
type interpreters struct {
	mu       sync.Mutex
	ready    map[model.SandboxID]time.Time
	starting map[model.SandboxID]*interpStart
}

// interpStart is one start under way, which concurrent requests wait for.
type interpStart struct {
	done chan struct{}
	err  error
}

func newInterpreters() *interpreters {
	return &interpreters{ready: make(map[model.SandboxID]time.Time), starting: make(map[model.SandboxID]*interpStart)}
}

func (in *interpreters) forget(sb model.SandboxID) {
	in.mu.Lock()
	delete(in.ready, sb)
	in.mu.Unlock()
}

// ensure makes sure sandbox sb's code interpreter listens, starting it
// when it does not; concurrent requests share one start, each waiting at
// most until its own context ends.
func (in *interpreters) ensure(ctx context.Context, g *Gateway, native *client.Client, sb model.Sandbox) error {
	in.mu.Lock()
	if at, ok := in.ready[sb.ID]; ok && at.Equal(sb.UpdatedAt) {
		in.mu.Unlock()
		return nil
	}
	st := in.starting[sb.ID]
	first := st == nil
	if first {
		st = &interpStart{done: make(chan struct{})}
		in.starting[sb.ID] = st
	}
	in.mu.Unlock()
	if first {
		st.err = in.start(ctx, g, native, sb)
		in.mu.Lock()
		delete(in.starting, sb.ID)
		if st.err == nil {
			if len(in.ready) >= maxInterpreters {
				clear(in.ready)
			}
			in.ready[sb.ID] = sb.UpdatedAt
		}
		in.mu.Unlock()
		close(st.done)
		return st.err
	}
	select {
	case <-st.done:
		return st.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start probes the code interpreter and, when it does not answer, starts
// it and waits until it does.
func (in *interpreters) start(ctx context.Context, g *Gateway, native *client.Client, sandbox model.Sandbox) error {
	sb := sandbox.ID
	if g.probeInterpreter(ctx, sandbox) {
		return nil
	}
	if _, err := native.StatFile(ctx, sb, InterpreterPath); err != nil {
		if client.IsNotFound(err) {
			return fmt.Errorf("sandbox %s has no code interpreter (%s is missing): create it from the code-interpreter template", sb, InterpreterPath)
		}
		return fmt.Errorf("look for the code interpreter in sandbox %s: %w", sb, err)
	}
	// As root, as E2B's runs: the server runs each context as the owner of
	// its working directory (/home/user: user; /root: root), since in a
	// sandbox root lacks CAP_DAC_OVERRIDE and could not write in user's
	// home.
	_, err := native.CreateCommand(ctx, sb, apiv1.CreateCommandRequest{
		Args:       []string{InterpreterPath.String(), "--port", CodeInterpreterPort.String()},
		Cwd:        "/",
		User:       &apiv1.User{UID: 0, GID: 0},
		Env:        map[string]string{"HOME": "/root", "USER": "root"},
		Background: true,
	})
	if err != nil {
		return fmt.Errorf("start the code interpreter in sandbox %s: %w", sb, err)
	}
	deadline := time.NewTimer(interpreterStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the code interpreter of sandbox %s did not listen on port %d within %s", sb, CodeInterpreterPort, interpreterStartTimeout)
		case <-tick.C:
		}
		if g.probeInterpreter(ctx, sandbox) {
			return nil
		}
	}
}

// probeInterpreter asks the code interpreter's /health through the ports
// route.
func (g *Gateway) probeInterpreter(ctx context.Context, sb model.Sandbox) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.cfg.SelfURL+portPath(sb.ID, CodeInterpreterPort)+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := g.cfg.API.AsSandbox(sb.ProjectID, sb.ID).RoundTrip(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
