package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/worker"
)

// startEnv is a runc env whose template has cfg's start and ready commands.
func startEnv(t *testing.T, cfg template.Config) *env {
	return newEnvFull(t, "runc", nil, Config{}, nil, func(wc *worker.Config) {
		wc.TemplateDefaults = func(model.TemplateDigest) (template.Defaults, error) {
			c := template.DefaultConfig()
			c.StartCmd, c.ReadyCmd, c.ReadyTimeoutMS = cfg.StartCmd, cfg.ReadyCmd, cfg.ReadyTimeoutMS
			return template.Defaults{Config: c}, nil
		}
	})
}

// A create runs the template's start command and succeeds only once its
// ready command did: the process runs when the sandbox is running, what it
// did before the ready command passed is there, and a repeated ensure
// (a retried step) starts it no second time.
func TestCreateRunsStartCommand(t *testing.T) {
	e := startEnv(t, template.Config{StartCmd: "sleep 1; echo up > /tmp/started; exec sleep 1000", ReadyCmd: "[ -f /tmp/started ]", ReadyTimeoutMS: 30000})
	e.run()
	id, opID := e.create()
	start := time.Now()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op.Error)
	}
	if time.Since(start) < time.Second {
		t.Fatal("the create did not wait for the ready command")
	}
	agent, err := e.wk.Agent(id)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list, err := agent.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, p := range list {
		if len(p.Args) == 3 && strings.Contains(p.Args[2], "echo up") {
			starts++
			if !p.Running {
				t.Errorf("the start command is not running: %+v", p)
			}
		}
	}
	if starts != 1 {
		t.Fatalf("%d start processes: %+v", starts, list)
	}
	res, err := agent.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"cat", "/tmp/started"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "up" {
		t.Fatalf("cat: %q %v", res.Stdout, err)
	}
	// A repeated ensure of the running sandbox starts nothing again.
	if err := e.wk.Ensure(ctx, e.sandbox(id)); err != nil {
		t.Fatal(err)
	}
	list, _ = agent.List(ctx)
	n := 0
	for _, p := range list {
		if len(p.Args) == 3 && strings.Contains(p.Args[2], "echo up") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("after a repeated ensure: %d start processes", n)
	}
	e.waitOp(e.delete(id))
}

// A ready command that never succeeds fails the create with
// template_not_ready, at once (no retry), and leaves nothing running.
func TestCreateNeverReady(t *testing.T) {
	e := startEnv(t, template.Config{StartCmd: "exec sleep 1000", ReadyCmd: "echo not yet; false", ReadyTimeoutMS: 1000})
	e.run()
	id, opID := e.create()
	op := e.waitOp(opID)
	if op.State != model.OpFailed || op.Error == nil || op.Error.Code != apiv1.CodeTemplateNotReady ||
		!strings.Contains(op.Error.Message, "did not succeed within 1s") || !strings.Contains(op.Error.Message, "not yet") {
		t.Fatalf("create: %+v %+v", op.State, op.Error)
	}
	if op.Attempts != 1 {
		t.Errorf("%d attempts: a template that is not ready is not retried", op.Attempts)
	}
	if sb := e.sandbox(id); sb.State != model.StateFailed {
		t.Errorf("sandbox %s", sb.State)
	}
	if _, err := e.rt.State(context.Background(), id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("the failed sandbox is still on the runtime: %v", err)
	}
}
