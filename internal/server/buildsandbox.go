package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// Build sandboxes: a recipe's run and packages steps on a template base
// run inside a sandbox of the step's parent template, made as any create
// is (the sandboxes service stores it with its create operation, the
// controller hands it to this node's worker, the runtime starts it), in
// the build's project (its quota counts it) and with the server's default
// egress policy (--egress-default). The command runs through the native
// API in-process, as the sandbox's access token would (its output goes to
// the build's log); then the sandbox is paused, so that none of its
// processes writes any more, and the recipe builder copies its writable
// layer (runtime.LayerReader) before the sandbox is deleted. Nothing of
// the template runs on the host.

// buildSandboxTimeout bounds each wait of a build sandbox's life (running,
// paused, deleted).
const buildSandboxTimeout = 5 * time.Minute

// buildSandboxes makes the build sandboxes of this node's builds
// (build.Sandboxes). Its dependencies are set by wire once the API exists,
// before the build runner runs.
type buildSandboxes struct {
	env    environment.Name    // "": none can be made here (why; an api replica)
	why    string              // why not
	layers runtime.LayerReader // the writable layers of env's sandboxes
	log    *slog.Logger
	deps   atomic.Pointer[buildSandboxDeps]
}

type buildSandboxDeps struct {
	svc     *sandboxes.Service
	st      store.Store
	inproc  *api.InProcess
	selfURL string
}

// choose picks the environment of build sandboxes: the default if its
// runtime hands out writable layers, else the first enabled one that does
// (the OCI runtimes do; QEMU's disks do not). Called once, before the
// build runner runs.
func (bs *buildSandboxes) choose(enabled []enabledEnvironment, def environment.Name) {
	pick := func(e enabledEnvironment) bool {
		lr, ok := e.rt.(runtime.LayerReader)
		if ok {
			bs.env, bs.layers = e.local.Name, lr
		}
		return ok
	}
	for _, e := range enabled {
		if e.local.Name == def && pick(e) {
			return
		}
	}
	for _, e := range enabled {
		if pick(e) {
			return
		}
	}
	bs.why = "no enabled execution environment of this server keeps a sandbox's writes in a layer it can read (runsc, runc or crun; not qemu)"
}

func (bs *buildSandboxes) wire(svc *sandboxes.Service, st store.Store, inproc *api.InProcess, selfURL string) error {
	self, err := loopbackURL(selfURL)
	if err != nil {
		return err
	}
	bs.deps.Store(&buildSandboxDeps{svc: svc, st: st, inproc: inproc, selfURL: self})
	return nil
}

// For implements build.Sandboxes.
func (bs *buildSandboxes) For(b model.TemplateBuild) recipe.Sandbox {
	return &buildSandbox{bs: bs, build: b}
}

// buildSandbox runs the steps of one build.
type buildSandbox struct {
	bs    *buildSandboxes
	build model.TemplateBuild
}

func (s *buildSandbox) Run(ctx context.Context, req recipe.SandboxRun) (recipe.SandboxResult, error) {
	bs := s.bs
	deps := bs.deps.Load()
	switch {
	case bs.env == "":
		return recipe.SandboxResult{}, fmt.Errorf("%w: %s", recipe.ErrNoSandbox, bs.why)
	case deps == nil:
		return recipe.SandboxResult{}, fmt.Errorf("%w: the server is not serving yet", recipe.ErrNoSandbox)
	case s.build.Project == "" || s.build.Project == model.SystemProject:
		return recipe.SandboxResult{}, fmt.Errorf("%w: build %s belongs to no project, whose sandbox it could make", recipe.ErrNoSandbox, s.build.ID)
	}
	project := s.build.Project
	// An earlier step's template is in the template store only: recorded
	// here (untagged, so collected once unused) for the create to find.
	// The build holds the store's guard meanwhile.
	if err := deps.st.PutTemplate(ctx, model.Template{Digest: req.Parent.Digest, SizeBytes: req.Parent.SizeBytes,
		Manifest: req.Parent.Manifest, CreatedAt: time.Now()}); err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("record template %s: %w", req.Parent.Digest, err)
	}
	md, err := model.ParseMetadata(map[string]string{model.BuildSandboxMetadata: s.build.ID.String()})
	if err != nil {
		return recipe.SandboxResult{}, err
	}
	created, err := deps.svc.Create(ctx, sandboxes.CreateRequest{
		Project:     project,
		Template:    model.RefByDigest(req.Parent.Digest),
		Resources:   deps.svc.DefaultResources(),
		Metadata:    md,
		Environment: &environment.Selector{Name: bs.env},
		Local:       true,
		Now:         time.Now().UTC().Truncate(time.Microsecond),
	})
	if err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("create the build sandbox: %w", err)
	}
	id := created.Sandbox.ID
	fmt.Fprintf(req.Log, "airlock: build sandbox %s (%s) of %s\n", id, bs.env, req.Parent.Digest)
	release := func() {
		// Deleted even when the build was canceled, and waited for, so
		// that the build ends with nothing of the sandbox left.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildSandboxTimeout)
		defer cancel()
		if err := s.delete(ctx, deps, id); err != nil {
			bs.log.Warn("delete a build sandbox", "sandbox", id, "build", s.build.ID, "err", err)
		}
	}
	res, err := s.run(ctx, deps, id, req)
	if err != nil {
		release()
		return recipe.SandboxResult{}, err
	}
	res.Release = release
	return res, nil
}

func (s *buildSandbox) run(ctx context.Context, deps *buildSandboxDeps, id model.SandboxID, req recipe.SandboxRun) (recipe.SandboxResult, error) {
	project := s.build.Project
	if err := waitSandbox(ctx, deps.st, id, model.StateRunning); err != nil {
		return recipe.SandboxResult{}, err
	}
	hc := &http.Client{Transport: deps.inproc.AsSandbox(project, id),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c, err := client.New(deps.selfURL, "", client.WithHTTPClient(hc), client.WithUserAgent("airlock-build"))
	if err != nil {
		return recipe.SandboxResult{}, err
	}
	env := make(map[string]string, len(req.Env))
	for _, kv := range req.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	user, cwd := &apiv1.User{UID: 0, GID: 0}, "/"
	if req.User != nil {
		user = &apiv1.User{UID: int64(req.User.UID), GID: int64(req.User.GID)}
	}
	if req.Dir != "" {
		cwd = req.Dir
	}
	cr := apiv1.CreateCommandRequest{Args: req.Argv, Env: env, Cwd: cwd, User: user}
	if req.Timeout > 0 {
		cr.TimeoutSecs = int((req.Timeout + time.Second - 1) / time.Second)
	}
	sess, err := c.CreateCommand(ctx, id, cr)
	if err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("start the command in build sandbox %s: %w", id, err)
	}
	stream, err := c.Attach(ctx, sess.AttachURL, sess.AttachmentToken)
	if err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("attach to the command in build sandbox %s: %w", id, err)
	}
	defer stream.Close()
	exit := 0
	for done := false; !done; {
		ev, err := stream.Next()
		if err != nil {
			if ctx.Err() != nil {
				return recipe.SandboxResult{}, ctx.Err()
			}
			return recipe.SandboxResult{}, fmt.Errorf("the command's output in build sandbox %s: %w", id, err)
		}
		switch ev.Kind {
		case apiv1.EventStdout, apiv1.EventStderr:
			req.Log.Write(ev.Data)
		case apiv1.EventGap:
			fmt.Fprintf(req.Log, "\nairlock: some output of the command was lost\n")
		case apiv1.EventExit:
			exit, done = ev.ExitCode, true
		case apiv1.EventError:
			msg := "the stream failed"
			if ev.Err != nil {
				msg = ev.Err.Code + ": " + ev.Err.Message
			}
			return recipe.SandboxResult{}, fmt.Errorf("the command in build sandbox %s: %s", id, msg)
		}
	}
	if exit != 0 || req.Check {
		return recipe.SandboxResult{ExitCode: exit}, nil
	}
	// No process of the sandbox writes from here on.
	if _, err := deps.svc.Lifecycle(ctx, sandboxes.LifecycleRequest{Project: project, Sandbox: id, Kind: model.OpPause,
		Now: time.Now().UTC().Truncate(time.Microsecond)}); err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("pause build sandbox %s: %w", id, err)
	}
	if err := waitSandbox(ctx, deps.st, id, model.StatePaused); err != nil {
		return recipe.SandboxResult{}, err
	}
	layer, err := s.bs.layers.WritableLayer(id)
	if err != nil {
		return recipe.SandboxResult{}, fmt.Errorf("build sandbox %s: %w", id, err)
	}
	res := recipe.SandboxResult{Layer: layer.Dir}
	if layer.IDs != nil {
		res.IDHost, res.IDSize = layer.IDs.Host, layer.IDs.Size
	}
	return res, nil
}

func (s *buildSandbox) delete(ctx context.Context, deps *buildSandboxDeps, id model.SandboxID) error {
	_, err := deps.svc.Delete(ctx, sandboxes.DeleteRequest{Project: s.build.Project, Sandbox: id, Now: time.Now().UTC().Truncate(time.Microsecond)})
	if err != nil && !errors.Is(err, model.ErrInvalidTransition) {
		return err
	}
	return waitSandbox(ctx, deps.st, id, model.StateDeleted)
}

// waitSandbox waits until sandbox id is in state want; a sandbox that
// fails (or is deleted, unless that is awaited) meanwhile is an error.
func waitSandbox(ctx context.Context, st store.Store, id model.SandboxID, want model.SandboxState) error {
	ctx, cancel := context.WithTimeout(ctx, buildSandboxTimeout)
	defer cancel()
	changed := st.Watch(ctx)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		sb, err := st.GetSandboxByID(ctx, id)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("build sandbox %s: %w", id, err)
		case err == nil && sb.State == want:
			return nil
		case err == nil && (sb.State == model.StateFailed || sb.State == model.StateDeleted):
			return fmt.Errorf("build sandbox %s is %s, not %s: %s", id, sb.State, want, sb.StateReason)
		}
		select {
		case <-ctx.Done():
			if context.Cause(ctx) == context.DeadlineExceeded {
				return fmt.Errorf("build sandbox %s is not %s after %s", id, want, buildSandboxTimeout)
			}
			return ctx.Err()
		case <-changed:
		case <-tick.C:
		}
	}
}

// reapOrphans deletes the build sandboxes placed on node that a server
// which stopped mid-build left (at start nothing builds here yet, so every
// one is an orphan; the build itself runs again and makes a new one).
func reapOrphans(ctx context.Context, st store.Store, svc *sandboxes.Service, node model.NodeID, log *slog.Logger) error {
	sbs, err := st.ListSandboxesOnNode(ctx, node)
	if err != nil {
		return fmt.Errorf("build sandboxes left by a previous run: %w", err)
	}
	for _, sb := range sbs {
		if sb.Metadata[model.BuildSandboxMetadata] == "" || sb.State == model.StateDeleting {
			continue
		}
		_, err := svc.Delete(ctx, sandboxes.DeleteRequest{Project: sb.ProjectID, Sandbox: sb.ID, Now: time.Now().UTC().Truncate(time.Microsecond)})
		if err != nil && !errors.Is(err, model.ErrInvalidTransition) {
			return fmt.Errorf("delete build sandbox %s left by a previous run: %w", sb.ID, err)
		}
		log.Info("deleting a build sandbox a previous run left", "sandbox", sb.ID, "build", sb.Metadata[model.BuildSandboxMetadata])
	}
	return nil
}
