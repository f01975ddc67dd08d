package integration

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
)

// TestShellThroughPTY runs `airlock shell SBX` on a real pseudo-terminal,
// as a user at a terminal would: the remote terminal takes our size and
// follows a resize, typed keys reach the shell, and airlock exits with the
// shell's exit code. Without a terminal, stdin is forwarded as it is.
func TestShellThroughPTY(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 2*time.Minute)
			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
			env := append(os.Environ(), "AIRLOCK_URL="+s.url, "AIRLOCK_API_KEY="+s.key)

			cmd := exec.CommandContext(ctx, bins.airlock, "shell", sb.ID)
			cmd.Env = env
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
			if err != nil {
				t.Fatal(err)
			}
			defer ptmx.Close()
			out := &lockedBuffer{}
			copied := make(chan struct{})
			go func() {
				defer close(copied)
				_, _ = io.Copy(out, ptmx) // ends with EIO once airlock exits
			}()
			waitFor := func(what string) {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(out.String(), what) {
					if time.Now().After(deadline) {
						t.Fatalf("no %q on the terminal; it shows %q", what, out.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			type1 := func(line string) {
				t.Helper()
				if _, err := ptmx.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
			}
			type1("stty size\r")
			waitFor("30 100")
			if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // SIGWINCH → resize message
			type1("stty size; echo h''i; exit 3\r")
			waitFor("40 120")
			err = cmd.Wait()
			<-copied
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
				t.Fatalf("airlock shell ended with %v, want exit code 3; terminal:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "hi\r\n") {
				t.Fatalf("no hi on the terminal:\n%q", out.String())
			}

			// Not a terminal: no raw mode, 24x80, stdin's end closes the shell's.
			cmd = exec.CommandContext(ctx, bins.airlock, "shell", sb.ID, "--", "sh", "-c", "stty size; read x; echo got $x; exit 4")
			cmd.Env = env
			cmd.Stdin = strings.NewReader("piped\n")
			b, err := cmd.Output()
			if !errors.As(err, &exitErr) || exitErr.ExitCode() != 4 || !strings.Contains(string(b), "24 80") || !strings.Contains(string(b), "got piped") {
				t.Fatalf("piped shell: %v, output %q", err, b)
			}
		})
	}
}
