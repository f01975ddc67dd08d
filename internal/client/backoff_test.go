package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry/retrytest"
)

// TestRetryBackoff: a failing request is retried after the client's
// backoff (first delay doubling, ±25%, at most 2 s before jitter), or after
// the server's Retry-After when that is longer (at most 2 s); on a fake
// clock, so the test does not sleep.
func TestRetryBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		failures   int
		retryAfter string
		retries    int
		first      time.Duration
		want       []time.Duration // base delays, ±25% unless exact
		exact      bool
		wantErr    string
	}{
		{"succeeds at once", 0, "", 4, 100 * ms, nil, false, ""},
		{"doubles", 3, "", 4, 100 * ms, []time.Duration{100 * ms, 200 * ms, 400 * ms}, false, ""},
		{"caps at max delay", 4, "", 4, 700 * ms, []time.Duration{700 * ms, 1400 * ms, 2000 * ms, 2000 * ms}, false, ""},
		{"gives up", 9, "", 2, 100 * ms, []time.Duration{100 * ms, 200 * ms}, false, "gave up after 3 attempts"},
		{"retry-after wins, capped", 2, "7", 4, 100 * ms, []time.Duration{2 * time.Second, 2 * time.Second}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if int(calls.Add(1)) <= tc.failures {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					writeJSON(w, 503, apiv1.Error{Code: apiv1.CodeUnavailable, Message: "starting"})
					return
				}
				writeJSON(w, 202, apiv1.OperationResponse{})
			}))
			defer srv.Close()
			c := newTestClient(t, srv.URL, WithRetries(tc.retries, tc.first))
			clock := retrytest.NewClock()
			c.clock = clock
			_, err := c.DeleteSandbox(context.Background(), model.NewSandboxID())
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			got := clock.Waits()
			if len(got) != len(tc.want) {
				t.Fatalf("waits %v, want about %v", got, tc.want)
			}
			for i, base := range tc.want {
				lo, hi := base*3/4, base*5/4+1
				if tc.exact {
					lo, hi = base, base
				}
				if got[i] < lo || got[i] > hi {
					t.Errorf("wait %d = %v, want %v (exact %v)", i, got[i], base, tc.exact)
				}
			}
		})
	}
}

// TestWaitOperationThrottlesEarlyAnswers: a server that answers long polls
// at once without news is polled after a growing delay (from 100 ms,
// doubling, at most 1 s, ±20%), not in a busy loop.
func TestWaitOperationThrottlesEarlyAnswers(t *testing.T) {
	var polls atomic.Int32
	op := model.NewOperationID()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := apiv1.Operation{ID: op.String(), Kind: "create", SandboxID: "sbx_x", State: "pending"}
		if polls.Add(1) > 6 {
			o.State = "succeeded"
		}
		writeJSON(w, 200, o)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	clock := retrytest.NewClock()
	c.clock = clock
	if _, err := c.WaitOperation(context.Background(), op, WithPollWait(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}
	got := clock.Waits()
	if len(got) != len(want) {
		t.Fatalf("waits %v, want about %v", got, want)
	}
	for i, base := range want {
		if got[i] < base*4/5 || got[i] > base*6/5+1 {
			t.Errorf("wait %d = %v, want %v ±20%%", i, got[i], base)
		}
	}
}
