package controller

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
)

// TestMetricsOfOperations: a create on the real runtime is observed in the
// create histogram (environment runc, source cold) and counted with the
// delete as succeeded operations; a create that fails is counted failed.
func TestMetricsOfOperations(t *testing.T) {
	m := metrics.New()
	e := newEnvWith(t, "runc", nil, Config{Metrics: m})
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
	want := `
# HELP airlock_operations_finished_total Lifecycle operations this process finished, by kind and outcome (succeeded or failed; a cancelled operation failed).
# TYPE airlock_operations_finished_total counter
airlock_operations_finished_total{kind="create",outcome="succeeded"} 1
airlock_operations_finished_total{kind="delete",outcome="succeeded"} 1
`
	// The controller counts an operation just after the store recorded its
	// outcome, which is what waitOp sees: give the count a moment.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err = testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "airlock_operations_finished_total")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Registry(), "airlock_sandbox_create_seconds"); n != 1 {
		t.Fatalf("create histogram has %d series, want 1", n)
	}
	out := scrapeText(t, m)
	if !containsLine(out, `airlock_sandbox_create_seconds_count{environment="runc",source="cold"} 1`) {
		t.Fatalf("no cold runc create observed:\n%s", out)
	}

	failing := metrics.New()
	f := newEnvWith(t, "runc", os.ErrNotExist, Config{Metrics: failing})
	f.run()
	_, failOp := f.create()
	if op := f.waitOp(failOp); op.State != model.OpFailed {
		t.Fatalf("create with a missing template: %+v", op)
	}
	for deadline := time.Now().Add(10 * time.Second); !containsLine(scrapeText(t, failing), `airlock_operations_finished_total{kind="create",outcome="failed"} 1`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed create was not counted")
		}
	}
}

func scrapeText(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d", rec.Code)
	}
	return rec.Body.String()
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
