package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
)

func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = Run(ctx, Env{Stdout: &out, Stderr: &errb}, append([]string{"bench", "create"}, args...))
	return code, out.String(), errb.String()
}

func TestBenchCreateUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no runs", []string{"--runs", "0"}, exitUsage, "--runs must be at least 1"},
		{"negative warmup", []string{"--warmup", "-1"}, exitUsage, "--warmup must not be negative"},
		{"bad output", []string{"-o", "yaml"}, exitUsage, "--output must be table or json"},
		{"stray argument", []string{"now"}, exitUsage, `unexpected argument "now"`},
		{"bad log level", []string{"--log-level", "loud"}, exitUsage, "--log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runBench(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

func TestBenchCreateBadRuntime(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	code, _, stderr := runBench(t, "--runtimes", "kata", "--agent-binary", agent)
	if code != exitFailure || !strings.Contains(stderr, `unknown OCI runtime "kata"`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestBenchCreateRunc runs the real benchmark, small: Airlock on runc
// against `runc run`, two runs each, JSON output.
func TestBenchCreateRunc(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	airtest.BusyboxPath(t)
	agent := airtest.BuildAgent(t)
	code, stdout, stderr := runBench(t, "--runs", "2", "--warmup", "1", "--runtimes", "runc",
		"--peers", "runc", "--pool=false", "--agent-binary", agent, "--seed", "7", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
	}
	var rep struct {
		Runs     int    `json:"runs"`
		Warmup   int    `json:"warmup"`
		Seed     uint64 `json:"seed"`
		Subjects []struct {
			Name        string `json:"name"`
			Isolation   string `json:"isolation"`
			FirstOutput struct {
				N     int     `json:"n"`
				P50ms float64 `json:"p50_ms"`
			} `json:"first_output"`
			SamplesMs []float64 `json:"samples_ms"`
		} `json:"subjects"`
		Ratios []struct {
			Airlock string  `json:"airlock"`
			Peer    string  `json:"peer"`
			P50     float64 `json:"p50"`
		} `json:"ratios"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if rep.Runs != 2 || rep.Warmup != 1 || rep.Seed != 7 || len(rep.Subjects) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	for _, s := range rep.Subjects {
		if s.FirstOutput.N != 2 || len(s.SamplesMs) != 2 || s.FirstOutput.P50ms <= 0 || s.Isolation != "shared-kernel" {
			t.Errorf("subject %+v", s)
		}
	}
	if len(rep.Ratios) != 1 || rep.Ratios[0].Airlock != "airlock-runc" || rep.Ratios[0].Peer != "runc run" || rep.Ratios[0].P50 <= 0 {
		t.Errorf("ratios = %+v", rep.Ratios)
	}
	for _, want := range []string{"starting an airlock server on runc", "[warm-up 1/1]", "[1/2]", "[2/2]"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress on stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestBenchNodesUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "1,0"}, "--nodes: every count must be at least 1"},
		{[]string{"--creates", "0"}, "--creates must be at least 1"},
		{[]string{"--clients", "0"}, "--clients must be at least 1"},
		{[]string{"--database-url", "mysql://x"}, "--database-url must be a postgres:// URL"},
		{[]string{"--placement-cache", "-1s"}, "--placement-cache and --analyze must not be negative"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := Run(context.Background(), Env{Stdout: &out, Stderr: &errb}, append([]string{"bench", "nodes"}, tt.args...))
		if code != exitUsage || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errb.String(), exitUsage, tt.want)
		}
	}
}
