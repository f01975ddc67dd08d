package worker

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// fakeRuntime records what is asked of it. phase is what State reports
// ("" = ErrNotFound); caps are its Info().Capabilities.
type fakeRuntime struct {
	mu      sync.Mutex
	deleted []model.SandboxID
	created []runtime.Spec
	phase   runtime.Phase
	caps    runtime.Capabilities
	calls   []string
}

func (f *fakeRuntime) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeRuntime) Info() runtime.Info { return runtime.Info{Name: "fake", Capabilities: f.caps} }
func (f *fakeRuntime) Create(_ context.Context, spec runtime.Spec) error {
	f.record("create")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, spec)
	return nil
}
func (f *fakeRuntime) Start(context.Context, model.SandboxID) error {
	f.record("start")
	return nil
}
func (f *fakeRuntime) Stop(context.Context, model.SandboxID) error     { return nil }
func (f *fakeRuntime) List(context.Context) ([]model.SandboxID, error) { return nil, nil }
func (f *fakeRuntime) State(_ context.Context, id model.SandboxID) (runtime.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.phase == "" {
		return runtime.Status{}, runtime.ErrNotFound
	}
	return runtime.Status{ID: id, Phase: f.phase, Pid: 1}, nil
}
func (f *fakeRuntime) DialAgent(context.Context, model.SandboxID) (net.Conn, error) {
	return nil, errors.New("no agent")
}
func (f *fakeRuntime) Delete(_ context.Context, id model.SandboxID) error {
	f.record("delete")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	return nil
}
func (f *fakeRuntime) Pause(context.Context, model.SandboxID) error {
	f.record("pause")
	return nil
}
func (f *fakeRuntime) Resume(context.Context, model.SandboxID) error {
	f.record("resume")
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
	if c, err := w.Agent(id); !errors.Is(err, guestops.ErrSandboxGone) || c != nil {
		t.Fatalf("Agent after Destroy = %v, %v; want ErrSandboxGone", c, err)
	}
	w.mu.Lock()
	n := len(w.agents)
	w.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d agent clients left after Destroy", n)
	}
}

// fakeNetwork records attaches and detaches.
type fakeNetwork struct {
	mu       sync.Mutex
	attached map[model.SandboxID]int
	detached []model.SandboxID
	ca       []byte
}

func (f *fakeNetwork) Attach(_ context.Context, id model.SandboxID) (runtime.Network, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attached == nil {
		f.attached = map[model.SandboxID]int{}
	}
	f.attached[id]++
	return runtime.Network{NetnsPath: "/run/netns/" + id.String(), DNS: netip.MustParseAddr("10.213.0.1"), CACertPEM: f.ca}, nil
}

func (f *fakeNetwork) Detach(_ context.Context, id model.SandboxID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detached = append(f.detached, id)
	return nil
}

// The network is attached before the runtime creates the sandbox, reaches
// its spec (with the CA variables in its environment, the sandbox's own
// winning) and is detached after the runtime deleted it.
func TestNetworkAttachedAndDetached(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ca      []byte
		sbxEnv  model.Env
		wantEnv map[string]string // "" = absent
	}{
		{"no CA", nil, nil, map[string]string{"SSL_CERT_FILE": "", "TPL": "1"}},
		{"CA", []byte("pem"), nil, map[string]string{
			"SSL_CERT_FILE": runtime.GuestCABundle, "REQUESTS_CA_BUNDLE": runtime.GuestCABundle, "CURL_CA_BUNDLE": runtime.GuestCABundle,
			"PIP_CERT": runtime.GuestCABundle, "GIT_SSL_CAINFO": runtime.GuestCABundle, "NODE_EXTRA_CA_CERTS": runtime.GuestCACert, "TPL": "1"}},
		{"sandbox env wins", []byte("pem"), model.Env{"SSL_CERT_FILE": "/mine.pem"}, map[string]string{"SSL_CERT_FILE": "/mine.pem", "CURL_CA_BUNDLE": runtime.GuestCABundle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, nw := &fakeRuntime{}, &fakeNetwork{ca: tc.ca}
			w, err := New(Config{
				Runtime: rt, Network: nw, AgentBinary: "/bin/true",
				TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
				TemplateEnv: func(model.TemplateDigest) ([]string, error) {
					return []string{"TPL=1", "SSL_CERT_FILE=/template.pem"}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			sb := model.Sandbox{ID: model.NewSandboxID(), Env: tc.sbxEnv}
			spec, err := w.spec(context.Background(), sb)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.runtimeCreate(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			if len(rt.created) != 1 || rt.created[0].Network == nil || rt.created[0].Network.NetnsPath != "/run/netns/"+sb.ID.String() {
				t.Fatalf("created %+v", rt.created)
			}
			env := rt.created[0].Env
			for k, want := range tc.wantEnv {
				got, ok := env[k]
				if want == "" && k == "SSL_CERT_FILE" && got == "/template.pem" {
					continue // without a CA the template's value stays
				}
				if want == "" && ok || want != "" && got != want {
					t.Errorf("env %s = %q (set %v), want %q", k, got, ok, want)
				}
			}
			if nw.attached[sb.ID] != 1 {
				t.Fatalf("attached %v", nw.attached)
			}
			if err := w.Destroy(context.Background(), sb.ID); err != nil {
				t.Fatal(err)
			}
			if len(nw.detached) != 1 || nw.detached[0] != sb.ID || len(rt.deleted) != 1 {
				t.Fatalf("detached %v, deleted %v", nw.detached, rt.deleted)
			}
		})
	}
}
