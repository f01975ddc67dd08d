package cli

import (
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

func TestExitCodeOf(t *testing.T) {
	tests := []struct {
		name string
		ev   client.Event
		want int
		msg  string
	}{
		{"success", client.Event{Kind: apiv1.EventExit, ExitCode: 0}, 0, ""},
		{"failure", client.Event{Kind: apiv1.EventExit, ExitCode: 7}, 7, ""},
		{"max", client.Event{Kind: apiv1.EventExit, ExitCode: 255}, 255, ""},
		{"out of range", client.Event{Kind: apiv1.EventExit, ExitCode: 300}, 255, ""},
		{"-1 without a signal", client.Event{Kind: apiv1.EventExit, ExitCode: -1}, 255, ""},
		{"KILL", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "KILL"}, 137, "airlock: the command was killed by SIGKILL"},
		{"SIGTERM spelling", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "SIGTERM"}, 143, "airlock: the command was killed by SIGTERM"},
		{"SEGV", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "SEGV"}, 139, "airlock: the command was killed by SIGSEGV"},
		{"INT", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "INT"}, 130, "airlock: the command was killed by SIGINT"},
		{"PIPE", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "PIPE"}, 141, "airlock: the command was killed by SIGPIPE"},
		{"SYS", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "SYS"}, 159, "airlock: the command was killed by SIGSYS"},
		{"number", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "9"}, 137, "airlock: the command was killed by SIG9"},
		{"real-time", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "RTMIN+2"}, 128 + 36, "airlock: the command was killed by SIGRTMIN+2"},
		{"unknown signal", client.Event{Kind: apiv1.EventExit, ExitCode: -1, Signal: "BOGUS"}, 255, "airlock: the command was killed by SIGBOGUS"},
		{"exec failed", client.Event{Kind: apiv1.EventError, Err: &apiv1.Error{Code: "exec_failed", Message: "no such file"}}, 127, "error: no such file (exec_failed)"},
		{"other error", client.Event{Kind: apiv1.EventError, Err: &apiv1.Error{Code: "unavailable", Message: "lost the sandbox"}}, 1, "error: lost the sandbox (unavailable)"},
		{"error without body", client.Event{Kind: apiv1.EventError}, 1, "error: the command failed without a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCodeOf(tt.ev); got != tt.want {
				t.Errorf("exit code %d, want %d", got, tt.want)
			}
			if got := endMessage(tt.ev); got != tt.msg {
				t.Errorf("message %q, want %q", got, tt.msg)
			}
		})
	}
}

func TestSignalNumber(t *testing.T) {
	for name, want := range map[string]int{"HUP": 1, "sigquit": 3, "ABRT": 6, "IOT": 6, "USR1": 10, "CHLD": 17, "STOP": 19, "WINCH": 28, "POLL": 29, "IO": 29, "PWR": 30} {
		if got, ok := signalNumber(name); !ok || got != want {
			t.Errorf("%s: %d, %v; want %d", name, got, ok, want)
		}
	}
	for _, bad := range []string{"", "0", "128", "-1", "RTMIN+40", "NOPE"} {
		if n, ok := signalNumber(bad); ok {
			t.Errorf("%q mapped to %d", bad, n)
		}
	}
}
