package worker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// startFails is a runtime whose Start fails.
type startFails struct{ *fakeRuntime }

func (startFails) Start(context.Context, model.SandboxID) error {
	return errors.New("runtime: start: exit status 1")
}

// Failed runtime calls are counted by runtime and call; a sandbox the
// runtime does not have and a capability it lacks are not.
func TestRuntimeErrorsCounted(t *testing.T) {
	m := metrics.New()
	w, err := New(Config{
		Runtime: startFails{&fakeRuntime{}}, AgentBinary: "/bin/true", AgentWait: 50 * time.Millisecond,
		TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
		Metrics:     m,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sb := model.Sandbox{ID: model.NewSandboxID()}
	if err := w.Ensure(context.Background(), sb); err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("Ensure = %v, want the start's failure", err)
	}
	if _, err := w.Observe(context.Background(), sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Observe = %v", err)
	}
	if err := w.Pause(context.Background(), sb); !errors.Is(err, runtime.ErrNotSupported) {
		t.Fatalf("Pause without the capability = %v", err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatal(rec.Code)
	}
	var got []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "airlock_runtime_errors_total{") {
			got = append(got, l)
		}
	}
	if want := `airlock_runtime_errors_total{op="start",runtime="fake"} 1`; len(got) != 1 || got[0] != want {
		t.Fatalf("runtime errors = %q, want only %s", got, want)
	}
}
