package recipe

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

func TestParseStart(t *testing.T) {
	r := mustParse(t, "from: {template: minimal}\nstart_cmd: 'python3 -m http.server 8000'\nready_cmd: '[ -f /tmp/ready ]'\nready_timeout: 1m30s\n")
	if got := r.Start(); got != (Start{Cmd: "python3 -m http.server 8000", ReadyCmd: "[ -f /tmp/ready ]", ReadyTimeout: 90 * time.Second}) {
		t.Fatalf("start = %+v", got)
	}
	if got := mustParse(t, "from: {template: minimal}\nready_cmd: 'true'\n").Start(); got != (Start{ReadyCmd: "true"}) {
		t.Fatalf("ready alone = %+v", got)
	}
	for name, src := range map[string]string{
		"empty start":         "start_cmd: ''",
		"blank start":         "start_cmd: ' '",
		"empty ready":         "ready_cmd: ''",
		"not a duration":      "ready_cmd: 'true'\nready_timeout: soon",
		"bare number":         "ready_cmd: 'true'\nready_timeout: 30",
		"zero timeout":        "ready_cmd: 'true'\nready_timeout: 0s",
		"negative timeout":    "ready_cmd: 'true'\nready_timeout: -1s",
		"timeout over max":    "ready_cmd: 'true'\nready_timeout: 11m",
		"timeout without cmd": "ready_timeout: 10s",
		"NUL":                 "start_cmd: \"a\\0b\"",
		"list":                "start_cmd: [a, b]",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte("from: {template: minimal}\n" + src + "\n")); !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("Parse: %v, want ErrInvalid", err)
			}
		})
	}
}

// A recipe without start fields keeps the step keys it had before they
// existed (so its cached builds and its digest stay).
func TestStartKeepsOldKeys(t *testing.T) {
	b := &Builder{}
	const digest = "sha256:bc703171cb80a2b01673a098d7e0ff2388b2616bf025d8348e538f17529d6187"
	steps, err := b.plan(context.Background(), mustParse(t, "from: {template: '"+digest+"'}\nworkdir: /app\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	// The config step's arguments as they were before start_cmd existed.
	old := stepKey(steps[0].key, KindConfig, struct {
		Env     []string `json:"env"`
		Workdir string   `json:"workdir"`
		User    string   `json:"user"`
	}{[]string{}, "/app", ""}, "")
	if len(steps) != 2 || steps[1].kind != KindConfig || steps[1].key != old {
		t.Fatalf("config key changed: %+v", steps)
	}
	steps, err = b.plan(context.Background(), mustParse(t, "from: {template: '"+digest+"'}\nworkdir: /app\nstart_cmd: x\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || steps[1].key == old || steps[2].kind != KindStart {
		t.Fatalf("with a start command: %+v", steps)
	}
}

// A build records the start and ready commands after checking them in a
// sandbox of the result: the start command's output is in the log, the
// check leaves nothing in the tree, and a second build is cached.
func TestBuildChecksStart(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	src := "from: {template: '" + string(base) + "'}\nworkdir: /tmp\n" +
		"start_cmd: 'echo started-output; sleep 0.3; touch /tmp/flag; sleep 60'\nready_cmd: '[ -f /tmp/flag ]'\nready_timeout: 20s\n"
	start := time.Now()
	res, log := build(t, b, mustParse(t, src), "")
	if time.Since(start) > 30*time.Second {
		t.Fatal("the build waited for the start command to end")
	}
	for _, want := range []string{"started-output", "the template is ready", "start " + short(res.Steps[2].Key)} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	def, err := b.Store.Defaults(res.Imported.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if c := def.Config; c.StartCmd == "" || c.ReadyCmd != "[ -f /tmp/flag ]" || c.ReadyTimeout() != 20*time.Second || c.WorkingDir != "/tmp" {
		t.Fatalf("config %+v", c)
	}
	if res.Imported.Digest != res.Steps[1].Digest {
		t.Fatal("the check changed the template")
	}
	if _, err := os.Stat(filepath.Join(b.Store.RootfsDir(res.Imported.Digest), "tmp", "flag")); err == nil {
		t.Fatal("the check's file is in the template")
	}
	if _, err := os.Stat(b.tarPath(res.Steps[2].Key)); err == nil {
		t.Fatal("the check step wrote a tar of the tree")
	}
	again, _ := build(t, b, mustParse(t, src), "")
	if got := cachedSteps(again); !got[2] || again.Imported.Digest != res.Imported.Digest {
		t.Fatalf("second build cached %v", got)
	}
}

// A ready command that never succeeds fails the build, naming the step.
func TestBuildNeverReady(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	src := "from: {template: '" + string(base) + "'}\nstart_cmd: 'echo started'\nready_cmd: 'false'\nready_timeout: 1s\n"
	var log bytes.Buffer
	_, err := b.BuildWith(context.Background(), mustParse(t, src), "", buildOpts(b, &log))
	var se *StepError
	if !errors.As(err, &se) || se.Kind != KindStart || se.ExitCode != template.ReadyTimeoutExit {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "did not succeed within 1s") {
		t.Fatalf("log:\n%s", log.String())
	}
}
