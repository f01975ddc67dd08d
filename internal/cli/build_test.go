package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

func TestBuildUI(t *testing.T) {
	var plain strings.Builder
	ui := newBuildUI(&plain, apiv1.Build{ID: "bld_x", Name: "default", Source: "default"})
	_ = ui.event(client.BuildEvent{Log: "step 1/3 debian abc: CACHED\n"})
	_ = ui.event(client.BuildEvent{Progress: &apiv1.BuildProgressEventData{State: "running", StepsDone: 1, StepsCached: 1, StepsTotal: 3}})
	ui.end()
	if plain.String() != "step 1/3 debian abc: CACHED\n" {
		t.Fatalf("plain output %q", plain.String())
	}

	var tty strings.Builder
	ui = &buildUI{w: &tty, tty: true, width: 100, start: time.Now(), build: apiv1.Build{Name: "default"}}
	_ = ui.event(client.BuildEvent{Log: "step 2/3 packages def: building\nI: downloading pyth"})
	_ = ui.event(client.BuildEvent{Progress: &apiv1.BuildProgressEventData{State: "running", StepsDone: 1, StepsCached: 1, StepsTotal: 3, Bytes: 2048}})
	ui.end()
	out := tty.String()
	if !strings.Contains(out, "\r\033[Kbuilding default · step 1/3 (1 cached)") || !strings.HasSuffix(out, "\r\033[K") {
		t.Fatalf("terminal output %q", out)
	}
	for _, line := range strings.Split(out, "\r\033[K") {
		if len([]rune(line)) > 99 {
			t.Fatalf("line wider than the terminal: %q", line)
		}
	}
	if !strings.Contains(out, "step 2/3 packages def: building") {
		t.Fatalf("the last log line is not shown: %q", out)
	}
}
