package worker

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

// The template's Env is the base of a sandbox's; the sandbox's own Env
// replaces it name by name; within the template a later entry wins.
func TestSandboxEnv(t *testing.T) {
	for _, c := range []struct {
		name     string
		template []string
		sandbox  model.Env
		want     model.Env
	}{
		{name: "none", want: model.Env{}},
		{name: "template only", template: []string{"PATH=/t", "A=1", "EMPTY="}, want: model.Env{"PATH": "/t", "A": "1", "EMPTY": ""}},
		{name: "sandbox only", sandbox: model.Env{"B": "2"}, want: model.Env{"B": "2"}},
		{name: "sandbox overrides", template: []string{"A=tpl", "B=tpl", "C=x=y"}, sandbox: model.Env{"B": "sb", "D": "sb"},
			want: model.Env{"A": "tpl", "B": "sb", "C": "x=y", "D": "sb"}},
		{name: "later template entry wins", template: []string{"A=1", "A=2"}, want: model.Env{"A": "2"}},
	} {
		if got := SandboxEnv(c.template, c.sandbox); !maps.Equal(got, c.want) {
			t.Errorf("%s: SandboxEnv = %v, want %v", c.name, got, c.want)
		}
	}
}

// The worker gives the runtime the merged environment, and fails a
// sandbox whose template's config cannot be read for good.
func TestCreateUsesTemplateEnv(t *testing.T) {
	tpl := model.DigestFromSHA256([32]byte{7})
	rt := &fakeRuntime{}
	w, err := New(Config{
		Runtime:     rt,
		TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
		TemplateEnv: func(d model.TemplateDigest) ([]string, error) {
			if d != tpl {
				return nil, errors.New("no such template")
			}
			return []string{"PATH=/opt/bin", "A=tpl", "B=tpl"}, nil
		},
		AgentBinary: "/bin/true",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sb := model.Sandbox{ID: model.NewSandboxID(), Template: tpl, Env: model.Env{"B": "sb"}}
	spec, err := w.spec(context.Background(), sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.runtimeCreate(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	want := model.Env{"PATH": "/opt/bin", "A": "tpl", "B": "sb"}
	if len(rt.created) != 1 || !maps.Equal(rt.created[0].Env, want) {
		t.Fatalf("runtime got %+v, want Env %v", rt.created, want)
	}
	if !maps.Equal(sb.Env, model.Env{"B": "sb"}) {
		t.Errorf("the sandbox record's Env changed: %v", sb.Env)
	}
	sb.Template = model.DigestFromSHA256([32]byte{8})
	if _, err := w.spec(context.Background(), sb); !errors.Is(err, ErrPermanent) {
		t.Errorf("create with an unreadable template config: %v, want ErrPermanent", err)
	}
}
