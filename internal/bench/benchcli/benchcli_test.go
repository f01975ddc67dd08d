package benchcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/cli"
)

// Exit codes of airlock-bench (cli.Tool's).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = Run(ctx, cli.Env{Stdout: &out, Stderr: &errb}, append([]string{"create"}, args...))
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
		code := Run(context.Background(), cli.Env{Stdout: &out, Stderr: &errb}, append([]string{"nodes"}, tt.args...))
		if code != exitUsage || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errb.String(), exitUsage, tt.want)
		}
	}
}

func TestBenchForkUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs must be at least 1"},
		{[]string{"--warmup", "-1"}, "--warmup not negative"},
		{[]string{"--count", "0"}, "--count must be from 1 to 16"},
		{[]string{"--count", "17"}, "--count must be from 1 to 16"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := Run(context.Background(), cli.Env{Stdout: &out, Stderr: &errb}, append([]string{"fork"}, tt.args...))
		if code != exitUsage || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errb.String(), exitUsage, tt.want)
		}
	}
}
