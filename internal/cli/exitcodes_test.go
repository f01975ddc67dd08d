package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// TestFailedExitCode: a failed command exits with its error code's exit
// code in apiv1's vocabulary; exec_failed refused as a request exits 1 (as
// it always has), and so does an error without a code.
func TestFailedExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"plain", errors.New("connection refused"), exitFailure},
		{"api error", fmt.Errorf("create: %w", &client.APIError{Status: 404, Code: apiv1.CodeTemplateNotFound}), 1},
		{"api error without a code", &client.APIError{Status: 502, Message: "HTTP 502"}, exitFailure},
		{"unknown code", &client.APIError{Status: 409, Code: "some_new_code"}, exitFailure},
		{"exec_failed as a request", &client.APIError{Status: 400, Code: apiv1.CodeExecFailed}, exitFailure},
		{"failed operation", &client.OperationFailedError{Operation: apiv1.Operation{Error: &apiv1.Error{Code: apiv1.CodeNoCapacity}}}, 1},
		{"failed operation without a reason", &client.OperationFailedError{}, exitFailure},
	}
	for _, tt := range tests {
		if got := failedExitCode(tt.err); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
	for _, s := range apiv1.ErrorSpecs() {
		if s.Code == apiv1.CodeExecFailed {
			continue
		}
		if got := failedExitCode(&client.APIError{Status: s.Status, Code: s.Code}); got != s.Exit {
			t.Errorf("%s: exit %d, the vocabulary says %d", s.Code, got, s.Exit)
		}
	}
	ev := client.Event{Kind: apiv1.EventError, Err: &apiv1.Error{Code: apiv1.CodeExecFailed}}
	if got := exitCodeOf(ev); got != 127 {
		t.Errorf("a stream ending with exec_failed exits %d, want 127", got)
	}
}

// cliExitCodes are the exit codes the CLI has of its own: none of them
// may mean an error code.
var cliExitCodes = []int{exitOK, exitUsage, exitOutputLost, exitInterrupted, exitUnknownEnd}

// TestExitCodesDistinct: an error code's exit code is none of the CLI's
// own, and is no signal's (128+N) either.
func TestExitCodesDistinct(t *testing.T) {
	for _, s := range apiv1.ErrorSpecs() {
		if slices.Contains(cliExitCodes, s.Exit) || s.Exit > 128 {
			t.Errorf("%s: exit code %d is one the CLI uses for something else", s.Code, s.Exit)
		}
	}
}

// TestExitCodesDocumented: docs/errors.md lists every exit code of the
// CLI, its own and those of the error vocabulary.
func TestExitCodesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([0-9]+(?:\+N)?) \| `).FindAllSubmatch(b, -1) {
		documented[string(m[1])] = true
	}
	want := []string{"128+N"}
	for _, c := range append(slices.Clone(cliExitCodes), exitFailure) {
		want = append(want, strconv.Itoa(c))
	}
	for _, s := range apiv1.ErrorSpecs() {
		want = append(want, strconv.Itoa(s.Exit))
	}
	for _, w := range want {
		if !documented[w] {
			t.Errorf("docs/errors.md has no row for exit code %s", w)
		}
	}
}
