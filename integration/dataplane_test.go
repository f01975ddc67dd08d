package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// hashingScript writes n random bytes to stdout and their SHA-256, computed
// inside the sandbox, to stderr.
func hashingScript(n int64) string {
	return fmt.Sprintf("rm -f /tmp/h; mkfifo /tmp/h && { sha256sum < /tmp/h >&2 & head -c %d /dev/urandom | tee /tmp/h; wait; }", n)
}

// zeroScript writes n zero bytes in 1 MiB writes (one process, one pipe: the
// cheapest stream a guest can make, so the test measures Airlock and not
// gVisor's pipes); zeroHashScript prints their SHA-256, computed inside.
func zeroScript(n int64) string {
	return fmt.Sprintf("dd if=/dev/zero bs=1048576 count=%d 2>/dev/null", n>>20)
}
func zeroHashScript(n int64) string { return zeroScript(n) + " | sha256sum >&2" }

// cliStream runs the airlock CLI with its stdout piped to the test.
func (s *server) cliStream(ctx context.Context, args ...string) (*exec.Cmd, io.ReadCloser, *strings.Builder) {
	s.t.Helper()
	cmd := exec.CommandContext(ctx, s.bins.airlock, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+s.url, "AIRLOCK_API_KEY="+s.key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	return cmd, out, &stderr
}

// insideHash is the hash sha256sum printed on stderr.
func insideHash(t *testing.T, stderr string) string {
	t.Helper()
	f := strings.Fields(stderr)
	if len(f) == 0 || len(f[0]) != 64 {
		t.Fatalf("no sha256sum on stderr: %q", stderr)
	}
	return f[0]
}

// 1 GiB through `airlock exec` arrives complete: the SHA-256 computed inside
// the sandbox matches the one of what the CLI wrote. A second run pauses
// reading for several seconds in the middle and still gets everything.
func TestExecLosslessGiB(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 8*time.Minute)
			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{CPUs: 2, MemoryMiB: 512})
			for _, tc := range []struct {
				name  string
				size  int64
				pause time.Duration
				zero  bool // deterministic zeros, hashed inside by a second command
			}{
				{"1GiB", 1 << 30, 0, true},
				{"random-paused-reader", 64 << 20, 5 * time.Second, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					want := ""
					script := hashingScript(tc.size)
					if tc.zero {
						_, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", zeroHashScript(tc.size))
						if code != 0 {
							t.Fatalf("hash inside: exit %d", code)
						}
						want, script = insideHash(t, stderr), zeroScript(tc.size)
					}
					start := time.Now()
					cmd, out, stderr := s.cliStream(ctx, "exec", sb.ID, "--", "sh", "-c", script)
					h := sha256.New()
					var n int64
					if tc.pause > 0 {
						k, err := io.CopyN(h, out, 1<<20)
						n += k
						if err != nil {
							t.Fatalf("first MiB: %v", err)
						}
						time.Sleep(tc.pause)
					}
					k, err := io.Copy(h, out)
					n += k
					if err != nil {
						t.Fatal(err)
					}
					if err := cmd.Wait(); err != nil {
						t.Fatalf("airlock exec: %v (stderr %q)", err, stderr.String())
					}
					got := hex.EncodeToString(h.Sum(nil))
					if want == "" {
						want = insideHash(t, stderr.String())
					}
					if n != tc.size || got != want {
						t.Fatalf("received %d of %d bytes, hash %s; inside %s (stderr %q)", n, tc.size, got, want, stderr.String())
					}
					t.Logf("%s: %d MiB in %v (%.0f MB/s)", rt, n>>20, time.Since(start), float64(n)/time.Since(start).Seconds()/1e6)
				})
			}
		})
	}
}

// Without a reader, output overflows the sandbox's buffer: the next reader
// gets a gap, and exec and attach report it on stderr and exit non-zero.
func TestExecReportsLostOutput(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	s := newServer(t, bins, serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
	// -d: nobody attached while it writes 20 MB.
	stdout, stderr, code := s.cli(ctx, "exec", "-d", sb.ID, "--", "sh", "-c", "head -c 20000000 /dev/zero; echo end")
	if code != 0 {
		t.Fatalf("exec -d: exit %d, %s", code, stderr)
	}
	pid := strings.TrimSpace(stdout)
	if _, err := model.ParseProcessID(pid); err != nil {
		t.Fatalf("exec -d printed %q", stdout)
	}
	c := s.client()
	if _, err := c.GetProcess(ctx, model.SandboxID(sb.ID), model.ProcessID(pid), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = s.cli(ctx, "attach", sb.ID, pid)
	if code != 125 || !strings.Contains(stderr, "output lost") || !strings.HasSuffix(stdout, "end\n") {
		t.Fatalf("attach after overflow: exit %d, %d bytes, stderr %q", code, len(stdout), stderr)
	}
	// ps lists it as exited (with -a).
	stdout, _, code = s.cli(ctx, "ps", "-a", sb.ID)
	if code != 0 || !strings.Contains(stdout, pid) || !strings.Contains(stdout, "exited (0)") {
		t.Fatalf("ps -a: %d %q", code, stdout)
	}
}

// exec -i forwards stdin and its end; kill signals a background process.
func TestExecStdinAndKill(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 3*time.Minute)
			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
			cmd := exec.CommandContext(ctx, s.bins.airlock, "exec", "-i", sb.ID, "--", "sh", "-c", "tr a-z A-Z; echo done")
			cmd.Env = append(os.Environ(), "AIRLOCK_URL="+s.url, "AIRLOCK_API_KEY="+s.key)
			cmd.Stdin = strings.NewReader("hello stdin\n")
			out, err := cmd.Output()
			if err != nil || string(out) != "HELLO STDIN\ndone\n" {
				t.Fatalf("exec -i: %q, %v", out, err)
			}
			stdout, stderr, code := s.cli(ctx, "exec", "-d", sb.ID, "--", "sleep", "300")
			if code != 0 {
				t.Fatalf("exec -d: %d %s", code, stderr)
			}
			pid := strings.TrimSpace(stdout)
			stdout, _, code = s.cli(ctx, "ps", sb.ID)
			if code != 0 || !strings.Contains(stdout, pid) || !strings.Contains(stdout, "sleep 300") {
				t.Fatalf("ps: %d %q", code, stdout)
			}
			stdout, stderr, code = s.cli(ctx, "kill", "--signal", "TERM", sb.ID, pid)
			if code != 0 || !strings.Contains(stdout, "killed (TERM)") {
				t.Fatalf("kill: %d %q %q", code, stdout, stderr)
			}
			_, stderr, code = s.cli(ctx, "attach", sb.ID, pid)
			if code != 128+15 {
				t.Fatalf("attach to the killed process: exit %d, %q", code, stderr)
			}
			// A command with a timeout is killed and says so.
			_, stderr, code = s.cli(ctx, "exec", "--command-timeout", "1s", sb.ID, "--", "sleep", "60")
			if code != 128+9 || !strings.Contains(stderr, "timed out") {
				t.Fatalf("timed-out exec: %d %q", code, stderr)
			}
			// And a command as another user.
			stdout, _, code = s.cli(ctx, "exec", "-u", "65534:65534", sb.ID, "--", "id", "-u")
			if code != 0 || strings.TrimSpace(stdout) != "65534" {
				t.Fatalf("exec -u: %d %q", code, stdout)
			}
		})
	}
}

// rssKiB returns a process's resident set size.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// stalledAttach opens an attach stream over raw TCP with a tiny receive
// buffer, reads only the status line, and never reads again.
func stalledAttach(t *testing.T, attachURL, token string) (net.Conn, int) {
	t.Helper()
	u, err := url.Parse(attachURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	tc := conn.(*net.TCPConn)
	_ = tc.SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", u.Path, u.Host, token)
	line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	status, _ := strconv.Atoi(f[1])
	return conn, status
}

// The attack that broke the skeleton: many attaches to one fast writer that
// never read. They are capped (429 beyond the caps), memory stays bounded,
// the agent connection stays usable, the sandbox deletes promptly, and
// SIGTERM ends the server within its grace.
func TestStalledAttachAttack(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	s := newServer(t, bins, serverConfig{runtime: "runc", extraArgs: []string{"--shutdown-grace", "3s"}})
	s.start()
	ctx := ctxFor(t, 4*time.Minute)
	c := s.client()
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)
	cs, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"cat", "/dev/zero"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	before := rssKiB(t, s.cmd.Process.Pid)
	var conns []net.Conn
	counts := map[int]int{}
	for i := range 300 {
		tok := cs.AttachmentToken
		if i%4 == 0 && i > 0 { // fresh tokens too, to reach the per-process cap
			a, err := c.CreateAttachment(ctx, id, model.ProcessID(cs.ProcessID))
			if err != nil {
				t.Fatal(err)
			}
			tok = a.AttachmentToken
		}
		conn, status := stalledAttach(t, cs.AttachURL, tok)
		counts[status]++
		if status == 200 {
			conns = append(conns, conn)
		} else {
			conn.Close()
		}
	}
	time.Sleep(3 * time.Second) // let every stream fill what it can
	after := rssKiB(t, s.cmd.Process.Pid)
	t.Logf("statuses %v; server RSS %d MiB → %d MiB", counts, before>>10, after>>10)
	if counts[200] > 8 || counts[429] < 280 {
		t.Fatalf("attach caps did not hold: %v", counts)
	}
	if after-before > 200<<10 {
		t.Fatalf("server grew by %d MiB with %d stalled attaches", (after-before)>>10, counts[200])
	}
	for _, conn := range conns {
		conn.Close()
	}
	// The sandbox's agent connection still works.
	if r := execIn(ctx, t, c, id, "echo", "still here"); r.stdout != "still here\n" {
		t.Fatalf("exec after the attack: %+v", r)
	}
	// Delete is prompt: no controller slot is stuck on the sandbox.
	res, err := c.DeleteSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if op, err := c.WaitOperation(dctx, model.OperationID(res.Operation.ID)); err != nil || op.State != string(model.OpSucceeded) {
		t.Fatalf("delete after the attack: %+v, %v", op, err)
	}
	// SIGTERM with a stalled stream open ends the server within its grace (plus a second to write the reconnect event).
	sb2 := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	cs2, err := c.CreateCommand(ctx, model.SandboxID(sb2.ID), apiv1.CreateCommandRequest{Args: []string{"cat", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, status := stalledAttach(t, cs2.AttachURL, cs2.AttachmentToken)
	defer conn.Close()
	if status != 200 {
		t.Fatalf("attach: %d", status)
	}
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	s.waitExit(20 * time.Second)
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("SIGTERM took %v with a 3 s grace (+1 s to write the reconnect event)", d)
	}
	t.Logf("SIGTERM with a stalled stream: server gone in %v", time.Since(start))
}

// SIGTERM drains: an attached stream keeps receiving output during the
// grace period, readiness fails, and the server is gone soon after it.
func TestSIGTERMDrainsLiveStreams(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	s := newServer(t, bins, serverConfig{runtime: "runc", extraArgs: []string{"--shutdown-grace", "2s"}})
	s.start()
	ctx := ctxFor(t, 2*time.Minute)
	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
	cmd, out, _ := s.cliStream(ctx, "exec", sb.ID, "--", "sh", "-c", "i=0; while :; do echo line$i; i=$((i+1)); sleep 0.1; done")
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the stream ended: %v", lines.Err())
		}
		return lines.Text()
	}
	next()
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	// Output keeps flowing during the grace period.
	var during int
	for time.Since(start) < 1500*time.Millisecond {
		next()
		during++
	}
	if during < 5 {
		t.Fatalf("only %d lines in the first 1.5 s of the drain", during)
	}
	if resp, err := http.Get(s.url + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("ready while draining")
		}
	}
	s.waitExit(20 * time.Second)
	t.Logf("%d lines during the drain; server gone %v after SIGTERM", during, time.Since(start))
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("server took %v to stop with a 2 s grace", d)
	}
	s.start() // the cleanup deletes the sandbox through a running server
}
