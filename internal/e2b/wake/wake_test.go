package wake

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeAPI is Airlock's API for one sandbox: GET answers the states of
// script in turn (the last repeats); wake and resume are recorded, may be
// refused busy, and then script what follows; operations are readable
// unless opsHidden (as for a sandbox's own credential).
type fakeAPI struct {
	mu        sync.Mutex
	id        model.SandboxID
	script    []model.SandboxState
	busy      int
	after     []model.SandboxState // the states after a wake or resume
	opState   string
	opsHidden bool
	calls     []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	base := "/v1/sandboxes/" + f.id.String()
	switch {
	case r.Method == "GET" && r.URL.Path == base:
		st := f.script[0]
		if len(f.script) > 1 {
			f.script = f.script[1:]
		}
		_ = json.NewEncoder(w).Encode(apiv1.Sandbox{ID: f.id.String(), State: string(st), StateReason: "no room"})
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, base+"/"):
		kind := strings.TrimPrefix(r.URL.Path, base+"/")
		f.calls = append(f.calls, kind)
		if f.busy > 0 {
			f.busy--
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeSandboxBusy, Message: "busy"})
			return
		}
		f.script = f.after
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(apiv1.SandboxWithOperation{Operation: apiv1.Operation{ID: model.NewOperationID().String(), Kind: kind, State: "pending"}})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/operations/"):
		if f.opsHidden {
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeTokenScope, Message: "scope"})
			return
		}
		_ = json.NewEncoder(w).Encode(apiv1.Operation{ID: strings.TrimPrefix(r.URL.Path, "/v1/operations/"), Kind: "wake", State: f.opState,
			Error: &apiv1.Error{Code: apiv1.CodeNoCapacity, Message: "no room"}})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeNotFound, Message: "not found"})
	}
}

func TestRunning(t *testing.T) {
	S := func(s ...model.SandboxState) []model.SandboxState { return s }
	running := S(model.StateWaking, model.StateRunning)
	for _, tc := range []struct {
		name      string
		script    []model.SandboxState
		after     []model.SandboxState
		busy      int
		opState   string
		opsHidden bool
		acted     bool
		calls     string
		check     func(error) bool
	}{
		{"running", S(model.StateRunning), nil, 0, "", false, false, "", nil},
		{"suspended", S(model.StateSuspended), running, 0, "", false, true, "wake", nil},
		{"paused", S(model.StatePaused), running, 0, "", false, true, "resume", nil},
		{"waking", S(model.StateWaking, model.StateWaking, model.StateRunning), nil, 0, "", false, false, "", nil},
		{"suspending, then woken", S(model.StateSuspending, model.StateSuspended), running, 0, "", false, true, "wake", nil},
		{"someone else's wake first", S(model.StateSuspended, model.StateWaking, model.StateRunning), nil, 1, "", false, false, "wake", nil},
		{"failed wake", S(model.StateSuspended), S(model.StateWaking, model.StateSuspended), 0, "failed", false, true, "wake", func(err error) bool {
			var of *client.OperationFailedError
			return errors.As(err, &of) && of.Operation.Error.Code == apiv1.CodeNoCapacity
		}},
		{"failed wake, operations hidden", S(model.StateSuspended), S(model.StateWaking, model.StateSuspended), 0, "", true, true, "wake", func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "no room")
		}},
		{"deleted", S(model.StateDeleted), nil, 0, "", false, false, "", func(err error) bool { return errors.Is(err, ErrGone) }},
		{"failed", S(model.StateFailed), nil, 0, "", false, false, "", func(err error) bool { return errors.Is(err, ErrGone) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{id: model.NewSandboxID(), script: tc.script, after: tc.after, busy: tc.busy, opState: tc.opState, opsHidden: tc.opsHidden}
			srv := httptest.NewServer(f)
			defer srv.Close()
			c, err := client.New(srv.URL, "k", client.WithRetries(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sb, acted, err := Running(ctx, c, f.id)
			f.mu.Lock()
			defer f.mu.Unlock()
			if strings.Join(f.calls, ",") != tc.calls || acted != tc.acted {
				t.Fatalf("calls %v acted %v, want %s %v (err %v)", f.calls, acted, tc.calls, tc.acted, err)
			}
			if tc.check != nil {
				if !tc.check(err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || sb.State != string(model.StateRunning) {
				t.Fatalf("%+v, %v", sb, err)
			}
		})
	}
}

// TestRunningUnknown: a sandbox the API does not know is its 404.
func TestRunningUnknown(t *testing.T) {
	f := &fakeAPI{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := client.New(srv.URL, "k", client.WithRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Running(context.Background(), c, model.NewSandboxID())
	if !client.IsCode(err, apiv1.CodeNotFound) {
		t.Fatalf("err = %v, want the API's not_found", err)
	}
}

// TestRunningCallerGone: the caller's context ending ends the wait with
// its error, not ErrTimeout.
func TestRunningCallerGone(t *testing.T) {
	f := &fakeAPI{id: model.NewSandboxID(), script: []model.SandboxState{model.StateWaking}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := client.New(srv.URL, "k", client.WithRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err = Running(ctx, c, f.id)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
}
