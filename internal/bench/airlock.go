package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/server"
)

// Timeouts of the Airlock subjects.
const (
	serverStartTimeout = 3 * time.Minute // includes the runtime probe
	airlockRunTimeout  = 2 * time.Minute // one create → output → delete
	deleteTimeout      = time.Minute
)

// Files the server writes into its data dir: the contract with the CLI.
const (
	serverURLFile = "server.url"
	adminKeyFile  = "admin.key"
)

// Names of the phases of an Airlock sample, in order.
var airlockPhases = []phaseName{
	{"create", "POST /v1/sandboxes → its create operation succeeded (long poll)"},
	{"command session", "POST /v1/sandboxes/{id}/commands [echo hello] → session returned"},
	{"first output", "attach (SSE, starts the process) → first stdout event"},
}

// phaseName names one phase of an Airlock sample and says what it times.
type phaseName struct{ name, what string }

// airlockServer is one in-process `airlock server` with one execution
// environment per runtime (servers own their network namespace's sandbox
// networks, so a benchmark runs one).
type airlockServer struct {
	flavors []oci.Flavor
	dir     string // the server's data dir
	log     *slog.Logger
	c       *client.Client

	stopServer context.CancelFunc
	serverDone chan error // receives server.Run's result once
	serverErr  error
	stopped    bool
}

// airlockSubject measures Airlock on one runtime of a server, driven through
// the Go client exactly as a user would drive it. The server's first
// subject owns it: its close stops the server.
type airlockSubject struct {
	*airlockServer
	flavor oci.Flavor
	owner  bool
}

// startAirlock starts a server on a fresh data dir with the one runtime
// flavor and returns its (owning) subject.
func startAirlock(ctx context.Context, flavor oci.Flavor, dir, agentBinary string, serverLog, log *slog.Logger,
	prepare func(dir string, opts *server.Options) error) (*airlockSubject, error) {
	subs, err := startAirlockServer(ctx, []oci.Flavor{flavor}, dir, agentBinary, serverLog, log, prepare)
	if err != nil {
		return nil, err
	}
	return subs[0], nil
}

// startAirlockServer starts a server on a fresh data dir with an
// environment per flavor (the first the default) and waits until it has
// written its URL and admin key; it returns a subject per flavor, the
// first owning the server. On failure it stops the server again.
func startAirlockServer(ctx context.Context, flavors []oci.Flavor, dir, agentBinary string, serverLog, log *slog.Logger,
	prepare func(dir string, opts *server.Options) error) ([]*airlockSubject, error) {
	// The server must outlive ctx: on Ctrl-C its sandboxes are deleted
	// through it before it stops (see close).
	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &airlockServer{flavors: flavors, dir: dir, log: log, stopServer: cancel, serverDone: make(chan error, 1)}
	opts := server.Options{
		DataDir:     dir,
		Listen:      "127.0.0.1:0",
		AgentBinary: agentBinary,
		Logger:      serverLog.With("server", a.name()),
		// The busybox template: the benchmark measures sandboxes, not
		// the Debian build.
		DefaultTemplate: server.DefaultTemplateMinimal,
	}
	for _, f := range flavors {
		opts.Environments = append(opts.Environments, environment.Name(f)) // f is a parsed oci.Flavor
	}
	if prepare != nil {
		if err := prepare(dir, &opts); err != nil {
			cancel()
			return nil, fmt.Errorf("airlock server on %s: %w", a.name(), err)
		}
	}
	go func() { a.serverDone <- server.Run(srvCtx, opts) }()

	url, key, err := a.waitReady(ctx)
	if err == nil {
		a.c, err = client.New(url, key, client.WithUserAgent("airlock-bench"))
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("airlock server on %s: %w", a.name(), err), a.stop())
	}
	subs := make([]*airlockSubject, len(flavors))
	for i, f := range flavors {
		subs[i] = &airlockSubject{airlockServer: a, flavor: f, owner: i == 0}
	}
	return subs, nil
}

// name lists the server's runtimes.
func (a *airlockServer) name() string {
	s := make([]string, len(a.flavors))
	for i, f := range a.flavors {
		s[i] = string(f)
	}
	return strings.Join(s, "+")
}

// waitReady polls for server.url and admin.key until both are there, the
// server fails, or ctx ends.
func (a *airlockServer) waitReady(ctx context.Context) (url, key string, err error) {
	deadline := time.NewTimer(serverStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		u, uerr := os.ReadFile(filepath.Join(a.dir, serverURLFile))
		k, kerr := os.ReadFile(filepath.Join(a.dir, adminKeyFile))
		if uerr == nil && kerr == nil && strings.HasSuffix(string(u), "\n") && len(strings.TrimSpace(string(k))) > 0 {
			return strings.TrimSpace(string(u)), strings.TrimSpace(string(k)), nil
		}
		select {
		case err := <-a.serverDone:
			a.stopped, a.serverErr = true, err
			if err == nil {
				err = errors.New("it stopped before it was ready")
			}
			return "", "", err
		case <-ctx.Done():
			return "", "", context.Cause(ctx)
		case <-deadline.C:
			return "", "", fmt.Errorf("not ready after %s", serverStartTimeout)
		case <-tick.C:
		}
	}
}

func (a *airlockSubject) info() Subject {
	s := Subject{
		Name:      "airlock-" + string(a.flavor),
		Kind:      KindAirlock,
		Runtime:   string(a.flavor),
		Isolation: environment.IsolationSharedKernel,
		Source:    apiv1.SourceCold,
		Method: "Go client against an in-process airlock server on 127.0.0.1: POST /v1/sandboxes (default template: the busybox tree, as --default-template minimal) → " +
			"create operation done → POST …/commands [echo hello] → attach → first stdout event",
		Rootfs: "per-sandbox overlayfs over the template tree (runc, crun: over an idmapped view of it, in the sandbox's own user namespace), " +
			"mounted inside the timed create; the guest agent is PID 1 and starts echo",
	}
	if a.flavor == oci.FlavorRunsc {
		s.Isolation = environment.IsolationUserSpaceKernel
	}
	return s
}

// defaultTemplate returns the digest the server's "default" name points at.
func (a *airlockSubject) defaultTemplate(ctx context.Context) (model.TemplateDigest, error) {
	list, err := a.c.ListTemplates(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range list.Templates {
		for _, n := range t.Names {
			if n == model.DefaultTemplate.String() {
				return model.ParseTemplateDigest(t.Digest)
			}
		}
	}
	return "", errors.New("the server has no default template (install the busybox-static package)")
}

// once creates a sandbox, runs echo in it, and deletes it (untimed; the
// deletion is waited for so that runs never overlap).
func (a *airlockSubject) once(ctx context.Context) (smp sample, err error) {
	return a.onceFrom(ctx, "")
}

// onceFrom is once on the template named by ref ("": the default). The
// sandbox must not come from a warm pool (the cold subject's creates match
// no pool).
func (a *airlockSubject) onceFrom(ctx context.Context, ref string) (smp sample, err error) {
	return a.createAndEcho(ctx, apiv1.CreateSandboxRequest{Template: ref, Environment: string(a.flavor)}, apiv1.SourceCold)
}

// createAndEcho times one create of req → echo → first output, and deletes
// the sandbox (untimed; waited for so that runs never overlap). want is the
// source the create must report: apiv1.SourcePool, or apiv1.SourceCold (a
// server that reports no source counts as cold, a pool claim never does).
func (a *airlockSubject) createAndEcho(ctx context.Context, req apiv1.CreateSandboxRequest, want string) (smp sample, err error) {
	ctx, cancel := context.WithTimeout(ctx, airlockRunTimeout)
	defer cancel()

	t0 := time.Now()
	created, err := a.c.CreateSandbox(ctx, req)
	if err != nil {
		return sample{}, err
	}
	id, err := model.ParseSandboxID(created.Sandbox.ID)
	if err != nil {
		return sample{}, fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	defer func() {
		if derr := a.deleteSandbox(context.WithoutCancel(ctx), id); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	op := created.Operation
	if op.State != string(model.OpSucceeded) {
		opID, err := model.ParseOperationID(op.ID)
		if err != nil {
			return sample{}, fmt.Errorf("the server returned a bad operation ID: %w", err)
		}
		if op, err = a.c.WaitOperation(ctx, opID); err != nil {
			return sample{}, err
		}
	}
	tCreated := time.Now()
	if err := checkSource(createSource(created.Sandbox, op), want); err != nil {
		return sample{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	cs, err := a.c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: peerArgs()})
	if err != nil {
		return sample{}, err
	}
	tSession := time.Now()
	first, out, err := a.attach(ctx, cs)
	if err != nil {
		return sample{}, err
	}
	if out != peerOutput {
		return sample{}, fmt.Errorf("sandbox %s printed %q, want %q", id, out, peerOutput)
	}
	return sample{
		total:  first.Sub(t0),
		phases: []time.Duration{tCreated.Sub(t0), tSession.Sub(tCreated), first.Sub(tSession)},
	}, nil
}

// createSource is the source a create reported: its operation's, else its
// sandbox's ("" from a server without warm pools).
func createSource(sb apiv1.Sandbox, op apiv1.Operation) string {
	if op.Source != "" {
		return op.Source
	}
	return sb.Source
}

// checkSource fails unless a create's source got is what the subject
// measures: a pool claim must say "pool"; a cold create must not (an
// unreported source counts as cold).
func checkSource(got, want string) error {
	switch {
	case want == apiv1.SourcePool && got != apiv1.SourcePool:
		return fmt.Errorf("the create was not served from the warm pool (source %q): a pool claim was not measured", got)
	case want == apiv1.SourceCold && got != "" && got != apiv1.SourceCold:
		return fmt.Errorf("a cold create was served from %q: the cold figure would be wrong", got)
	}
	return nil
}

// attach starts the command and returns when its first stdout event came,
// and what it printed by its (successful) exit.
func (a *airlockSubject) attach(ctx context.Context, cs apiv1.CommandSession) (time.Time, string, error) {
	st, err := a.c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
	if err != nil {
		return time.Time{}, "", err
	}
	defer st.Close()
	var (
		first  time.Time
		stdout strings.Builder
		stderr strings.Builder
	)
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return time.Time{}, "", errors.New("the attach stream ended without an exit event")
		}
		if err != nil {
			return time.Time{}, "", err
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			if first.IsZero() {
				first = time.Now()
			}
			stdout.Write(ev.Data)
		case apiv1.EventStderr:
			stderr.Write(ev.Data)
		case apiv1.EventError:
			msg := "no reason given"
			if ev.Err != nil {
				msg = ev.Err.Code + ": " + ev.Err.Message
			}
			return time.Time{}, "", fmt.Errorf("command failed: %s", msg)
		case apiv1.EventExit:
			if ev.ExitCode != 0 || ev.Signal != "" {
				return time.Time{}, "", fmt.Errorf("echo exited with code %d (signal %q): %s", ev.ExitCode, ev.Signal, strings.TrimSpace(stderr.String()))
			}
			if first.IsZero() {
				return time.Time{}, "", errors.New("echo exited without printing anything")
			}
			return first, stdout.String(), nil
		}
	}
}

// deleteSandbox deletes a sandbox and waits until it is gone.
func (a *airlockServer) deleteSandbox(ctx context.Context, id model.SandboxID) error {
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	resp, err := a.c.DeleteSandbox(ctx, id)
	switch {
	case client.IsCode(err, apiv1.CodeNotFound):
		return nil
	case client.IsCode(err, apiv1.CodeInvalidTransition):
		return a.waitGone(ctx, id) // already being deleted
	case err != nil:
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	opID, err := model.ParseOperationID(resp.Operation.ID)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: bad operation ID: %w", id, err)
	}
	if _, err := a.c.WaitOperation(ctx, opID); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// waitGone polls until the sandbox is deleted or unknown.
func (a *airlockServer) waitGone(ctx context.Context, id model.SandboxID) error {
	for {
		sb, err := a.c.GetSandbox(ctx, id)
		switch {
		case client.IsCode(err, apiv1.CodeNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("wait for sandbox %s to be deleted: %w", id, err)
		case sb.State == string(model.StateDeleted):
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s still %s: %w", id, sb.State, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close deletes every sandbox the server still has (an interrupted run may
// leave one, even one whose ID never reached us); the owner then stops the
// server and deletes, through the OCI driver, anything its runtimes still
// know. Subjects are closed last first, so the owner closes last.
func (a *airlockSubject) close(ctx context.Context) error {
	var errs []error
	if !a.stopped {
		if err := a.deleteAll(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if !a.owner {
		return errors.Join(errs...)
	}
	if err := a.stop(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range a.flavors {
		if err := a.sweepRuntime(ctx, f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *airlockServer) deleteAll(ctx context.Context) error {
	list, err := a.c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
	if err != nil {
		return fmt.Errorf("airlock server on %s: list sandboxes to delete: %w", a.name(), err)
	}
	var errs []error
	for _, sb := range list.Sandboxes {
		if sb.State == string(model.StateDeleted) {
			continue
		}
		id, err := model.ParseSandboxID(sb.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := a.deleteSandbox(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stop stops the server and waits for it. A server stopped by us (or that
// stopped cleanly) is no error.
func (a *airlockServer) stop() error {
	if !a.stopped {
		a.stopServer()
		a.serverErr = <-a.serverDone
		a.stopped = true
	}
	a.stopServer()
	if a.serverErr != nil && !errors.Is(a.serverErr, context.Canceled) {
		return fmt.Errorf("airlock server on %s: %w", a.name(), a.serverErr)
	}
	return nil
}

// sweepRuntime is the backstop after the server stopped: containers the
// runtime flavor still knows (a sandbox the server failed to delete) are
// deleted with the OCI driver, which also unmounts and removes their
// cgroups; then the runtime's shared agent filesystem is unmounted. The
// runtime's directories are the server's layout DATA/runtime/<flavor>/.
func (a *airlockServer) sweepRuntime(ctx context.Context, flavor oci.Flavor) error {
	base := filepath.Join(a.dir, "runtime", string(flavor))
	if _, err := os.Stat(base); err != nil {
		return nil
	}
	rt, err := oci.New(oci.Config{
		Flavor:    string(flavor),
		RootDir:   filepath.Join(base, "state"),
		StateRoot: filepath.Join(base, "sandboxes"),
		Logger:    a.log,
	})
	if err != nil {
		return fmt.Errorf("airlock-%s: open the runtime to clean up: %w", flavor, err)
	}
	ids, err := rt.List(ctx)
	if err != nil {
		return fmt.Errorf("airlock-%s: list leftover containers: %w", flavor, err)
	}
	var errs []error
	for _, id := range ids {
		a.log.Warn("deleting a sandbox the server left behind", "runtime", flavor, "sandbox", id)
		if err := rt.Delete(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The runtime's shared agent filesystem, which the server leaves
	// mounted for its sandboxes.
	return rt.ReleaseAgentFS(ctx)
}
