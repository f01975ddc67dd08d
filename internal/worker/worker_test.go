package worker

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procctl"
	"github.com/airlockdev/airlock/internal/runtime"
)

// fakeRuntime records deletes; nothing else is needed here.
type fakeRuntime struct {
	mu      sync.Mutex
	deleted []model.SandboxID
	created []runtime.Spec
}

func (f *fakeRuntime) Info() runtime.Info { return runtime.Info{Name: "fake"} }
func (f *fakeRuntime) Create(_ context.Context, spec runtime.Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, spec)
	return nil
}
func (f *fakeRuntime) Start(context.Context, model.SandboxID) error    { return nil }
func (f *fakeRuntime) Stop(context.Context, model.SandboxID) error     { return nil }
func (f *fakeRuntime) List(context.Context) ([]model.SandboxID, error) { return nil, nil }
func (f *fakeRuntime) State(context.Context, model.SandboxID) (runtime.Status, error) {
	return runtime.Status{}, runtime.ErrNotFound
}
func (f *fakeRuntime) DialAgent(context.Context, model.SandboxID) (net.Conn, error) {
	return nil, errors.New("no agent")
}
func (f *fakeRuntime) Delete(_ context.Context, id model.SandboxID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	return nil
}

// An attach that races a sandbox's destruction must not re-create an agent
// client that nothing would remove.
func TestNoAgentClientAfterDestroy(t *testing.T) {
	w, err := New(Config{Runtime: &fakeRuntime{}, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id := model.NewSandboxID()
	if _, err := w.Agent(id); err != nil {
		t.Fatalf("Agent of a live sandbox: %v", err)
	}
	if err := w.Destroy(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if c, err := w.Agent(id); !errors.Is(err, procctl.ErrSandboxGone) || c != nil {
		t.Fatalf("Agent after Destroy = %v, %v; want ErrSandboxGone", c, err)
	}
	w.mu.Lock()
	n := len(w.agents)
	w.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d agent clients left after Destroy", n)
	}
}
