package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestLongPollWakesOnFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.createSandbox(e.keyA, `{}`)
	type result struct {
		r   *resp
		dur time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		r := e.send(req{method: "GET", path: "/v1/operations/" + out.Operation.ID + "?wait=30s", key: e.keyA, t: t})
		done <- result{r, time.Since(start)}
	}()
	// Let the request start waiting, then finish the operation as the
	// reconciler would.
	time.Sleep(300 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("long poll returned before the operation finished: %d %s", res.r.status, res.r.body)
	default:
	}
	finished := time.Now()
	e.finishCreate(model.SandboxID(out.Sandbox.ID))
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("long poll did not return after the operation finished")
	}
	if lag := time.Since(finished); lag > 2*time.Second {
		t.Fatalf("long poll returned %s after the finish", lag)
	}
	var op apiv1.Operation
	res.r.want(t, http.StatusOK).decode(t, &op)
	if op.State != "succeeded" || op.FinishedAt == nil || op.Attempts != 1 {
		t.Fatalf("operation after finish: %+v", op)
	}
	// A finished operation answers at once, whatever the wait.
	start := time.Now()
	e.do("GET", "/v1/operations/"+out.Operation.ID+"?wait=60s", e.keyA, "").want(t, http.StatusOK)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a finished operation took %s to answer", d)
	}
}

func TestLongPollTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.createSandbox(e.keyA, `{}`)
	// Unrelated changes wake the poll but must not end it.
	go func() {
		time.Sleep(100 * time.Millisecond)
		e.createSandbox(e.keyB, `{}`)
	}()
	start := time.Now()
	var op apiv1.Operation
	e.do("GET", "/v1/operations/"+out.Operation.ID+"?wait=700ms", e.keyA, "").want(t, http.StatusOK).decode(t, &op)
	d := time.Since(start)
	if d < 700*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait=700ms answered after %s", d)
	}
	if op.State != "pending" || op.ID != out.Operation.ID {
		t.Fatalf("timed-out poll answered %+v, want the pending operation", op)
	}
	// wait=0s is an ordinary read.
	e.do("GET", "/v1/operations/"+out.Operation.ID+"?wait=0s", e.keyA, "").want(t, http.StatusOK)
}

// logCapture is a slog.Handler that hands each record to a channel.
type logCapture struct{ records chan slog.Record }

func (l logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l logCapture) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.records <- r.Clone():
	default:
	}
	return nil
}
func (l logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logCapture) WithGroup(string) slog.Handler      { return l }

func TestLongPollEndsWhenClientLeaves(t *testing.T) {
	t.Parallel()
	logs := logCapture{records: make(chan slog.Record, 1000)}
	e := newEnv(t, func(c *envConfig) { c.Logger = slog.New(logs) })
	out := e.createSandbox(e.keyA, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	path := "/v1/operations/" + out.Operation.ID
	hr, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"?wait=60s", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+e.keyA)
	left := time.Now()
	if _, err := e.srv.Client().Do(hr); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the client's deadline", err)
	}
	// The handler ends soon after: its request log line is written when it returns.
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-logs.records:
			if r.Message != "http request" {
				continue
			}
			var p string
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "path" {
					p = a.Value.String()
				}
				return true
			})
			if p == path {
				if d := time.Since(left); d > 2*time.Second {
					t.Fatalf("the handler ran on for %s after the client left", d)
				}
				return
			}
		case <-deadline:
			t.Fatal("the long-poll handler did not end after its client left")
		}
	}
}
