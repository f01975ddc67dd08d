package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
)

// benchOnPath builds airlock-bench and puts its directory first in PATH,
// where `airlock bench` finds it (the test binary has none beside it).
func benchOnPath(t *testing.T) {
	t.Helper()
	bin := airtest.BuildBinary(t, "./cmd/airlock-bench")
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// runAirlock runs `airlock ARGS` in this process.
func runAirlock(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = Run(ctx, Env{Stdout: &out, Stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestBenchNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, _, stderr := runAirlock(t, "bench", "create", "--runs", "1")
	for _, want := range []string{"airlock bench runs airlock-bench", "not next to this executable", "not found in $PATH", "./scripts/build.sh", "go build -o ", "./cmd/airlock-bench"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if code != exitFailure {
		t.Errorf("exit %d; want %d", code, exitFailure)
	}
}

// TestBenchHelp: `airlock bench --help` is airlock-bench's help, which
// lists every benchmark.
func TestBenchHelp(t *testing.T) {
	benchOnPath(t)
	code, stdout, stderr := runAirlock(t, "bench", "--help")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, sub := range []string{"create", "burst", "density", "exec", "throughput", "template-size", "template-build", "egress", "lifecycle", "vm", "nodes"} {
		if !strings.Contains(stdout, "\n  "+sub+" ") {
			t.Errorf("help lacks %q:\n%s", sub, stdout)
		}
	}
}

// TestBenchPassesThrough: arguments, flags (airlock's global ones before
// `bench` too) and exit codes go through airlock-bench unchanged.
func TestBenchPassesThrough(t *testing.T) {
	benchOnPath(t)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "create", "--runs", "0"}, exitUsage, "--runs must be at least 1\nRun 'airlock bench create --help' for usage."},
		{[]string{"bench", "nodes", "--creates", "0"}, exitUsage, "--creates must be at least 1"},
		{[]string{"-o", "yaml", "bench", "create"}, exitUsage, "--output must be table or json"},
		{[]string{"--url", "http://127.0.0.1:1", "--api-key", "k", "bench", "create", "--runs", "0"}, exitUsage, "--runs must be at least 1"},
		{[]string{"bench", "create", "--output=yaml"}, exitUsage, "--output must be table or json"},
		{[]string{"bench", "warp"}, exitUsage, `unknown command "warp" for "airlock bench"`},
	}
	for _, tt := range tests {
		code, _, stderr := runAirlock(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

// TestBenchCreateRunc runs the real benchmark through `airlock bench`,
// small: Airlock on runc against `runc run`, two runs each, JSON output.
func TestBenchCreateRunc(t *testing.T) {
	airtest.RequireRoot(t)
	benchOnPath(t)
	airtest.RequireBinary(t, "runc")
	airtest.BusyboxPath(t)
	agent := airtest.BuildAgent(t)
	code, stdout, stderr := runAirlock(t, "bench", "create", "--runs", "2", "--warmup", "1", "--runtimes", "runc",
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
