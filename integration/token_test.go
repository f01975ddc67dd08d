package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// streamStdout attaches with token and returns the process's stdout, or the
// refusal.
func streamStdout(ctx context.Context, c *client.Client, url, token string) (string, error) {
	st, err := c.Attach(ctx, url, token)
	if err != nil {
		return "", err
	}
	defer st.Close()
	var out strings.Builder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return out.String(), nil
		}
		if err != nil {
			return out.String(), err
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			out.Write(ev.Data)
		case apiv1.EventError:
			return out.String(), errors.New(ev.Err.Code + ": " + ev.Err.Message)
		}
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// TestAttachmentTokens: signed tokens through the real binaries: issue,
// re-issue narrowed, each plane refusing the other's token, rotation and a
// restart keeping issued tokens valid.
func TestAttachmentTokens(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	bins := build(t)
	s := newServer(t, bins, serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 2*time.Minute)
	c := s.client()
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)

	cs, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"echo", "signed"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := streamStdout(ctx, c, cs.AttachURL, cs.AttachmentToken); err != nil || out != "signed\n" {
		t.Fatalf("attach: %q, %v", out, err)
	}
	// A read-only token for the same process replays its output.
	ro, err := c.CreateAttachment(ctx, id, model.ProcessID(cs.ProcessID), "read")
	if err != nil {
		t.Fatal(err)
	}
	if ro.ProcessID != cs.ProcessID || ro.AttachmentToken == cs.AttachmentToken {
		t.Fatalf("re-issued %+v", ro)
	}
	if out, err := streamStdout(ctx, c, ro.AttachURL, ro.AttachmentToken); err != nil || out != "signed\n" {
		t.Fatalf("attach with the re-issued token: %q, %v", out, err)
	}
	// Each plane refuses the other's token.
	tc, err := client.New(s.url, cs.AttachmentToken)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tc.GetSandbox(ctx, id)
	wantCode(t, "attachment token on the management API", err, apiv1.CodeWrongTokenKind)
	_, err = streamStdout(ctx, c, cs.AttachURL, s.key)
	wantCode(t, "API key on the data plane", err, apiv1.CodeWrongTokenKind)
	// A token for another process.
	other, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = streamStdout(ctx, c, other.AttachURL, cs.AttachmentToken)
	wantCode(t, "token of another process", err, apiv1.CodePermissionDenied)

	// The keys: 0700 directory, 0600 files.
	keyDir := filepath.Join(s.dataDir, "keys", "attach")
	if fi, err := os.Stat(keyDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v", keyDir, fi, err)
	}
	files, _ := filepath.Glob(filepath.Join(keyDir, "*.key"))
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v", f, fi, err)
		}
	}
	if len(files) != 1 {
		t.Fatalf("key files %v, want one", files)
	}

	// Rotation: the old token keeps working; so does a restart.
	if stdout, stderr, code := s.cli(ctx, "admin", "attach-key", "rotate"); code != 0 || !strings.Contains(stdout, "true") {
		t.Fatalf("rotate: %d %s %s", code, stdout, stderr)
	}
	if out, err := streamStdout(ctx, c, ro.AttachURL, ro.AttachmentToken); err != nil || out != "signed\n" {
		t.Fatalf("pre-rotation token after the rotation: %q, %v", out, err)
	}
	s.stop()
	s.start()
	c = s.client()
	if out, err := streamStdout(ctx, c, s.url+apiv1.AttachPath(cs.ProcessID), ro.AttachmentToken); err != nil || out != "signed\n" {
		t.Fatalf("pre-restart token after the restart: %q, %v", out, err)
	}
}
