package worker

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// namedRuntime is a fake runtime that answers to a name.
type namedRuntime struct {
	fakeRuntime
	name string
}

func (n *namedRuntime) Info() runtime.Info { return runtime.Info{Name: n.name} }

func setWorker(t *testing.T, name environment.Name) *Worker {
	t.Helper()
	w, err := New(Config{Runtime: &namedRuntime{name: string(name)}, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestSetRoute(t *testing.T) {
	refA := model.EnvironmentRef("env:sha256:" + strings.Repeat("a", 64))
	refB := model.EnvironmentRef("env:sha256:" + strings.Repeat("b", 64))
	refOld := model.EnvironmentRef("env:sha256:" + strings.Repeat("c", 64))
	runsc, runc := setWorker(t, environment.NameRunsc), setWorker(t, environment.NameRunc)
	stored := map[model.SandboxID]model.Sandbox{}
	lookups := 0
	set, err := NewSet([]Environment{{environment.NameRunsc, refA, runsc}, {environment.NameRunc, refB, runc}}, func(_ context.Context, id model.SandboxID) (model.Sandbox, error) {
		lookups++
		sb, ok := stored[id]
		if !ok {
			return model.Sandbox{}, errors.New("no such sandbox")
		}
		return sb, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, tc := range []struct {
		name string
		sb   model.Sandbox
		want *Worker
	}{
		{"old row: default", model.Sandbox{}, runsc},
		{"unplaced, by reference", model.Sandbox{Environment: refB}, runc},
		{"placed, by runtime", model.Sandbox{Runtime: "runc", Environment: refA}, runc},
		{"placed, binary upgraded since", model.Sandbox{Runtime: "runsc", Environment: refOld}, runsc},
		{"unplaced, reference not here", model.Sandbox{Environment: refOld}, nil},
		{"placed on a runtime not driven", model.Sandbox{Runtime: "crun"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sb.ID = model.NewSandboxID()
			e, err := set.Route(tc.sb)
			if tc.want == nil {
				if !errors.Is(err, ErrNotDriven) || !errors.Is(err, ErrPermanent) {
					t.Fatalf("Route = %v, want ErrNotDriven", err)
				}
				return
			}
			if err != nil || e.Worker != tc.want {
				t.Fatalf("Route = %+v, %v", e, err)
			}
		})
	}

	// Agent: a sandbox not routed yet is looked up once, then remembered.
	sb := model.Sandbox{ID: model.NewSandboxID(), Runtime: "runc"}
	stored[sb.ID] = sb
	c1, err := set.Agent(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := set.Agent(sb.ID)
	if err != nil || c1 != c2 || lookups != 1 {
		t.Fatalf("second Agent = %p, %v after %d lookups; want the same client, one lookup", c2, err, lookups)
	}
	if _, err := runc.Agent(sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Agent(model.NewSandboxID()); err == nil {
		t.Fatal("Agent of an unknown sandbox succeeded")
	}
	gone := model.Sandbox{ID: model.NewSandboxID(), Runtime: "crun"}
	stored[gone.ID] = gone
	_, err = set.Agent(gone.ID)
	if !errors.Is(err, ErrNotDriven) {
		t.Fatalf("Agent of a sandbox of another runtime = %v", err)
	}
	if pe := agentguest.PublicError(err); pe.Code != apiv1.CodeEnvironmentUnavailable || pe.Status != http.StatusConflict {
		t.Fatalf("the API's answer to it: %+v", pe)
	}

	if _, err := NewSet([]Environment{{environment.NameRunsc, refA, runc}}, func(context.Context, model.SandboxID) (model.Sandbox, error) { return model.Sandbox{}, nil }); err == nil {
		t.Fatal("NewSet accepted a worker of another runtime")
	}
}
