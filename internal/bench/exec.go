package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

// execArgs is the command `airlock bench exec` runs in an already running
// sandbox or container.
func execArgs() []string { return []string{"true"} }

// execPhases are the parts of an Airlock exec sample, in order.
var execPhases = []phaseName{
	{"command session", "POST /v1/sandboxes/{id}/commands [true] → session returned"},
	{"attach", "GET attach (SSE; the server starts the process) → response headers"},
	{"exit", "response headers → exit event"},
}

// RunExec runs `airlock bench exec`: the round trip of `true` in an already
// running sandbox through the API (command session + attach until the exit
// event, the CLI's path) against `runc exec` / `crun exec` / `runsc exec`
// into an equivalent raw container. Podman is not an exec peer and is
// reported as skipped. It needs root; everything it creates is removed.
func RunExec(ctx context.Context, cfg Config) (Report, error) {
	return runWith(ctx, cfg, (*benchmark).runExec)
}

func (b *benchmark) runExec(ctx context.Context) (Report, error) {
	started := time.Now().UTC()
	first, err := b.startServers(ctx)
	if err != nil {
		return Report{}, err
	}
	digest, lower, err := b.templateTree(ctx, first)
	if err != nil {
		return Report{}, err
	}
	if err := b.setupExecSubjects(ctx, lower, apiv1.CreateSandboxRequest{}, nil, nil); err != nil {
		return Report{}, err
	}
	seed := b.seed()
	samples, err := b.rounds(ctx, seed)
	if err != nil {
		return Report{}, err
	}
	rep := Report{
		Benchmark: "airlock bench exec: round trip of `true` in an already running sandbox/container, from the request to the exit",
		StartedAt: started,
		Runs:      b.cfg.Runs,
		Warmup:    b.cfg.Warmup,
		Seed:      seed,
		Order:     fmt.Sprintf("each round runs every subject once, in a new random order (seed %d)", seed),
		Template:  digest.String(),
		Host:      hostFacts(ctx, b.cg, b.binaries, b.cfg.Version),
		Skipped:   b.skipped,
	}
	for i, s := range b.subjects {
		rep.Subjects = append(rep.Subjects, summarizeSubject(s.info(), samples[i], execPhases))
	}
	rep.Ratios = ratios(rep.Subjects)
	return rep, nil
}

// execAirlock runs `true` in one long-lived sandbox of one server.
type execAirlock struct {
	a    *airlockSubject
	req  apiv1.CreateSandboxRequest // the sandbox's settings (default: the API's)
	id   model.SandboxID
	http *http.Client // for the stdin route; see httpClient
}

// setup creates the sandbox and waits until it runs (untimed).
func (e *execAirlock) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, airlockRunTimeout)
	defer cancel()
	created, err := e.a.c.CreateSandbox(ctx, e.req)
	if err != nil {
		return err
	}
	id, err := model.ParseSandboxID(created.Sandbox.ID)
	if err != nil {
		return fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	e.id = id
	opID, err := model.ParseOperationID(created.Operation.ID)
	if err != nil {
		return fmt.Errorf("the server returned a bad operation ID: %w", err)
	}
	_, err = e.a.c.WaitOperation(ctx, opID)
	return err
}

func (e *execAirlock) info() Subject {
	s := e.a.info()
	s.Method = "Go client against an in-process airlock server on 127.0.0.1, one running sandbox: " +
		"POST …/commands [true] → attach (SSE) → exit event"
	s.Rootfs = "per-sandbox overlayfs over the template tree; the guest agent (PID 1) starts true in its workload pids cgroup (--pids-max)"
	return s
}

func (e *execAirlock) once(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, airlockRunTimeout)
	defer cancel()
	t0 := time.Now()
	cs, err := e.a.c.CreateCommand(ctx, e.id, apiv1.CreateCommandRequest{Args: execArgs()})
	if err != nil {
		return sample{}, err
	}
	t1 := time.Now()
	st, err := e.a.c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
	if err != nil {
		return sample{}, err
	}
	defer st.Close()
	t2 := time.Now()
	if err := waitExit(st, 0); err != nil {
		return sample{}, err
	}
	t3 := time.Now()
	return sample{total: t3.Sub(t0), phases: []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)}}, nil
}

func (e *execAirlock) close(ctx context.Context) error {
	if e.http != nil {
		e.http.CloseIdleConnections()
	}
	return e.a.close(ctx)
}

// waitExit reads st until the exit event and checks the exit code. Output
// is discarded.
func waitExit(st *client.Stream, want int) error {
	var stderr strings.Builder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("the attach stream ended without an exit event")
		}
		if err != nil {
			return err
		}
		switch ev.Kind {
		case apiv1.EventStderr:
			if stderr.Len() < 4096 {
				stderr.Write(ev.Data)
			}
		case apiv1.EventError:
			msg := "no reason given"
			if ev.Err != nil {
				msg = ev.Err.Code + ": " + ev.Err.Message
			}
			return fmt.Errorf("command failed: %s", msg)
		case apiv1.EventExit:
			if ev.ExitCode != want || ev.Signal != "" {
				return fmt.Errorf("exited with code %d (signal %q), want %d: %s", ev.ExitCode, ev.Signal, want, strings.TrimSpace(stderr.String()))
			}
			return nil
		}
	}
}

// isolationOf is the isolation of a peer name.
func isolationOf(peer string) environment.Isolation {
	if peer == PeerRunsc {
		return environment.IsolationUserSpaceKernel
	}
	return environment.IsolationSharedKernel
}

// setupExecSubjects turns the started servers into exec subjects, each with
// one running sandbox created with req, and adds a long-lived container of
// every installed peer (but podman: podman exec needs a podman-managed
// container) over the template tree lower. airlockReady and peerReady, if
// not nil, are called for each subject once it is ready.
func (b *benchmark) setupExecSubjects(ctx context.Context, lower string, req apiv1.CreateSandboxRequest, airlockReady func(*execAirlock) error, peerReady func(*execPeer)) error {
	servers := b.subjects
	b.subjects = nil
	for _, s := range servers {
		a := s.(*airlockSubject)
		r := req
		r.Environment = string(a.flavor) // the server runs every runtime
		e := &execAirlock{a: a, req: r}
		b.subjects = append(b.subjects, e) // closed (with its server) on cleanup
		b.progressf("creating a sandbox on airlock-%s…", a.flavor)
		if err := e.setup(ctx); err != nil {
			return fmt.Errorf("bench: airlock-%s: %w", a.flavor, err)
		}
		if airlockReady != nil {
			if err := airlockReady(e); err != nil {
				return fmt.Errorf("bench: airlock-%s: %w", a.flavor, err)
			}
		}
	}
	cgParent, err := cgroups.ParsePath("/" + filepath.Base(b.tmp))
	if err != nil {
		return fmt.Errorf("bench: cgroup parent: %w", err)
	}
	for _, p := range b.cfg.Peers {
		if p == PeerPodman {
			b.skipped = append(b.skipped, Skipped{Name: p, Reason: "no exec peer (podman exec needs a podman-managed container)"})
			continue
		}
		bin, err := exec.LookPath(p)
		if err != nil {
			b.skipped = append(b.skipped, Skipped{Name: p, Reason: "not installed"})
			continue
		}
		b.binaries[p] = bin
		ps, err := newPeer(p, bin, filepath.Join(b.tmp, "r-"+p), lower, b.cg, cgParent, b.cfg.Logger)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		e := &execPeer{p: ps}
		b.subjects = append(b.subjects, e)
		b.progressf("starting a %s container…", p)
		if err := e.setup(ctx); err != nil {
			return fmt.Errorf("bench: %s: %w", p, err)
		}
		if peerReady != nil {
			peerReady(e)
		}
	}
	return nil
}
