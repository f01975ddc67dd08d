package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// fakeGuest records what a GuestConfig changes.
type fakeGuest struct {
	calls []string
	fail  string // the call that fails
}

func (f *fakeGuest) record(call string) error {
	f.calls = append(f.calls, call)
	if strings.HasPrefix(call, f.fail) && f.fail != "" {
		return errors.New("injected failure")
	}
	return nil
}
func (f *fakeGuest) SetHostname(name string) error { return f.record("hostname " + name) }
func (f *fakeGuest) AddEntropy(b []byte) error {
	return f.record("entropy " + string(rune('0'+len(b)/32)))
}
func (f *fakeGuest) SetTime(t time.Time) error {
	return f.record("time " + t.UTC().Format(time.RFC3339))
}
func (f *fakeGuest) ConfigureNetwork(n guestNetwork) error {
	return f.record("network " + n.iface + " " + n.addr.String() + " via " + n.gateway.String())
}

func putGuest(t *testing.T, s *Server, body string) (int, agentproto.Error) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/guest", strings.NewReader(body)))
	var e agentproto.Error
	if rec.Code != http.StatusNoContent {
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
	}
	return rec.Code, e
}

func guestServer(t *testing.T) (*Server, *fakeGuest) {
	t.Helper()
	s, err := New(Options{Env: []string{"PATH=/bin", "A=agent", "B=agent"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f := &fakeGuest{}
	s.guest = f
	return s, f
}

func TestGuestConfigValidation(t *testing.T) {
	s, f := guestServer(t)
	entropy := func(n int) string { b, _ := json.Marshal(bytes.Repeat([]byte{1}, n)); return string(b) }
	for _, body := range []string{
		`{"hostname":"bad_name"}`,
		`{"hostname":"-x"}`,
		`{"hostname":"` + strings.Repeat("a", 65) + `"}`,
		`{"hostname":"a..b"}`,
		`{"env":["NOEQUALS"]}`,
		`{"env":["=v"]}`,
		`{"env":["A=\u0000"]}`,
		`{"entropy":` + entropy(31) + `}`,
		`{"entropy":` + entropy(agentproto.MaxEntropyBytes+1) + `}`,
		`{"entropy":"not base64!"}`,
		`{"time_unix_nano":-1}`,
		`{"pids_max":-1}`,
		`{"pids_max":5}`, // the agent runs processes in no cgroup
		`{"network":{"address":"10.0.0.2"}}`,
		`{"network":{"address":"10.0.0.2/30","gateway":"fe80::1"}}`,
		`{"network":{"address":"10.0.0.2/30","gateway":"x"}}`,
		`{"network":{"interface":"a/b","address":"10.0.0.2/30"}}`,
		`{"network":{"address":"10.0.0.2/30","dns":["nameserver"]}}`,
		`{"unknown":1}`,
		`{"hostname":"ok","env":["GOOD=1"],"network":{"address":"bad"}}`,
	} {
		code, e := putGuest(t, s, body)
		if code != http.StatusBadRequest || e.Code != agentproto.CodeInvalidRequest {
			t.Errorf("%s: %d %+v, want 400 %s", body, code, e, agentproto.CodeInvalidRequest)
		}
	}
	if len(f.calls) != 0 {
		t.Fatalf("invalid configs changed the guest: %v", f.calls)
	}
	if env := s.baseEnv(); envValue(env, "GOOD") != "" {
		t.Fatalf("invalid config changed the env: %v", env)
	}
}

func TestGuestConfigApplies(t *testing.T) {
	s, f := guestServer(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	cfg := agentproto.GuestConfig{
		Hostname: "clone-a", Env: []string{"A=guest", "C=guest"}, Entropy: bytes.Repeat([]byte{7}, 64),
		TimeUnixNano: now.UnixNano(),
		Network:      &agentproto.GuestNetwork{Address: "10.0.0.2/30", Gateway: "10.0.0.1", DNS: []string{"10.0.0.1"}},
	}
	body, _ := json.Marshal(cfg)
	for i := 0; i < 2; i++ { // idempotent
		if code, e := putGuest(t, s, string(body)); code != http.StatusNoContent {
			t.Fatalf("PUT %d: %d %+v", i, code, e)
		}
	}
	want := []string{"time 2026-12-01T08:00:00Z", "entropy 2", "hostname clone-a", "network eth0 10.0.0.2/30 via 10.0.0.1"}
	if !slices.Equal(f.calls, slices.Concat(want, want)) {
		t.Fatalf("calls %v, want %v twice", f.calls, want)
	}
	// Env: merged over the agent's, later PUTs accumulate; per-process env wins.
	if code, _ := putGuest(t, s, `{"env":["D=later"]}`); code != http.StatusNoContent {
		t.Fatal(code)
	}
	env := mergeEnv(s.baseEnv(), []string{"C=process"})
	for k, v := range map[string]string{"A": "guest", "B": "agent", "C": "process", "D": "later", "PATH": "/bin"} {
		if got := envValue(env, k); got != v {
			t.Errorf("%s=%q, want %q (env %v)", k, got, v, env)
		}
	}
	if n := len(env); n != 5 {
		t.Errorf("env %v has duplicates", env)
	}
	if !slices.Contains(s.info().Features, agentproto.FeatureGuestConfig) {
		t.Error("feature not reported")
	}
}

func TestGuestConfigStepFails(t *testing.T) {
	s, f := guestServer(t)
	f.fail = "hostname"
	code, e := putGuest(t, s, `{"hostname":"x","env":["E=1"]}`)
	if code != http.StatusInternalServerError || e.Code != agentproto.CodeInternal || !strings.Contains(e.Message, "host name") {
		t.Fatalf("%d %+v", code, e)
	}
	if envValue(s.baseEnv(), "E") != "" {
		t.Fatal("env applied after a failed step")
	}
}

// TestGuestConfigPidsMax: the host's pids limit lands in the workload
// cgroup's pids.max (a directory standing in for the cgroup).
func TestGuestConfigPidsMax(t *testing.T) {
	s, _ := guestServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("4194304"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cgroupDir = dir
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"pids_max":24}`, "24"},
		{`{"hostname":"x"}`, "24"}, // no pids_max: unchanged
		{`{"pids_max":1024}`, "1024"},
	} {
		if code, e := putGuest(t, s, tc.body); code != http.StatusNoContent {
			t.Fatalf("%s: %d %+v", tc.body, code, e)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "pids.max")); string(b) != tc.want {
			t.Errorf("after %s: pids.max = %q, want %q", tc.body, b, tc.want)
		}
	}
}
