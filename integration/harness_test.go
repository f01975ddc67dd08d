package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// binaries are the freshly built airlock and airlock-agent.
type binaries struct {
	airlock string
	agent   string
}

func build(t *testing.T) binaries {
	t.Helper()
	return binaries{
		airlock: airtest.BuildBinary(t, "./cmd/airlock"),
		agent:   airtest.BuildAgent(t),
	}
}

// serverConfig says how to start one `airlock server`.
type serverConfig struct {
	runtime     string // --runtime; "" = auto
	databaseURL string
	crashAt     string // AIRLOCK_TEST_CRASH_AT
	extraArgs   []string
	// netns, when set, runs the server (and s.cli) inside the fake
	// internet's host namespace; see egress_harness_test.go.
	netns serverNetns
	// adminKeyFile, when set, is passed as --admin-key-file and is where
	// the harness reads the admin key (else DATA_DIR/admin.key).
	adminKeyFile string
	// env is added to the server's environment (SSL_CERT_FILE=…).
	env []string
}

// server is one running (or crashed) `airlock server` process over a data dir
// that outlives it, so the test can restart it.
type server struct {
	t       *testing.T
	bins    binaries
	dataDir string
	cfg     serverConfig

	cmd    *exec.Cmd
	exited chan struct{}
	log    *lockedBuffer
	url    string
	key    string
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newServer prepares a data dir whose sandboxes are all deleted (and verified
// gone) when the test ends.
func newServer(t *testing.T, bins binaries, cfg serverConfig) *server {
	t.Helper()
	s := &server{t: t, bins: bins, dataDir: shortTempDir(t), cfg: cfg}
	t.Cleanup(s.cleanup)
	return s
}

// shortTempDir returns a temporary directory with a short path (agent socket
// paths must stay short), removed at the end of the test.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "al-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A safety net: a server that was killed and never restarted
		// may leave mounts (assertNoLeftovers reports them otherwise).
		mounts, err := rootfs.MountsUnder(dir)
		if err != nil {
			t.Errorf("list mounts under %s: %v", dir, err)
		}
		for _, m := range mounts {
			if err := rootfs.Unmount(context.Background(), slog.Default(), m); err != nil {
				t.Errorf("unmount %s: %v", m, err)
			}
		}
		os.RemoveAll(dir)
	})
	return dir
}

// start runs `airlock server` and waits until it serves.
func (s *server) start() {
	s.t.Helper()
	s.launch()
	s.awaitReady()
}

// harnessPidsBudget is the --pids-budget of the servers the tests start.
const harnessPidsBudget = 150000

// launch runs `airlock server`; awaitReady waits until it serves (several
// servers may be launched before waiting for each).
func (s *server) launch() {
	s.t.Helper()
	os.Remove(filepath.Join(s.dataDir, "server.url"))
	args := []string{"server", "--data-dir", s.dataDir, "--listen", "127.0.0.1:0", "--agent-binary", s.bins.agent}
	if s.cfg.runtime != "" {
		args = append(args, "--runtime", s.cfg.runtime)
	}
	if s.cfg.databaseURL != "" {
		args = append(args, "--database-url", s.cfg.databaseURL)
	}
	// The busybox template as default, at once; tests that want the Debian
	// build pass --default-template debian (a later flag wins).
	args = append(args, "--default-template", "minimal")
	// No test traffic leaves the machine: the egress resolver's upstream is
	// a closed local port unless a test gives its own (a later flag wins).
	args = append(args, "--egress-upstream-dns", "127.0.0.1:9")
	if s.cfg.adminKeyFile != "" {
		args = append(args, "--admin-key-file", s.cfg.adminKeyFile)
	}
	// The node's pids budget as a host booted with systemd derives it
	// (kernel.pid_max 4194304, which scripts/install-deps.sh sets; then
	// threads-max bounds it), whatever this machine's pid_max: on the
	// kernel's default of 32768 the derived budget holds ~6 runsc
	// sandboxes of 256 MiB. TestNodePidsBudget gives its own (a later
	// flag wins).
	args = append(args, "--pids-budget", strconv.Itoa(harnessPidsBudget))
	args = append(args, s.cfg.extraArgs...)
	cmd := s.command(context.Background(), s.bins.airlock, args...)
	cmd.Env = append(append(os.Environ(), "AIRLOCK_TEST_CRASH_AT="+s.cfg.crashAt), s.cfg.env...)
	// One log across restarts, so a failure shows every incarnation.
	if s.log == nil {
		s.log = &lockedBuffer{}
	}
	fmt.Fprintf(s.log, "----- airlock %s (AIRLOCK_TEST_CRASH_AT=%q)\n", strings.Join(args, " "), s.cfg.crashAt)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	// Its own process group, so the test can signal it alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start airlock server: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
}

func (s *server) awaitReady() {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(s.dataDir, "server.url")); err == nil && len(bytes.TrimSpace(b)) > 0 {
			s.url = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-s.exited:
			s.t.Fatalf("airlock server exited during start-up:\n%s", s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("airlock server did not start in time:\n%s", s.log.String())
		}
	}
	key, err := readAdminKey(s.dataDir)
	if s.cfg.adminKeyFile != "" {
		var b []byte
		b, err = os.ReadFile(s.cfg.adminKeyFile)
		key = strings.TrimSpace(string(b))
	}
	if err != nil {
		s.t.Fatalf("read admin.key: %v", err)
	}
	s.key = key
	resp, err := s.httpClient().Get(s.url + "/healthz")
	if err != nil {
		s.t.Fatalf("healthz: %v\n%s", err, s.log.String())
	}
	resp.Body.Close()
}

func readAdminKey(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	return strings.TrimSpace(string(b)), err
}

// kill SIGKILLs the server, as a crash would.
func (s *server) kill() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	s.waitExit(10 * time.Second)
}

// stop asks the server to shut down gracefully.
func (s *server) stop() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	s.waitExit(30 * time.Second)
}

// waitExit waits for the server process to end (for example, killed by an
// armed fault point).
func (s *server) waitExit(d time.Duration) {
	s.t.Helper()
	select {
	case <-s.exited:
		s.cmd = nil
	case <-time.After(d):
		s.t.Fatalf("airlock server did not exit within %v:\n%s", d, s.log.String())
	}
}

func (s *server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *server) client() *client.Client {
	s.t.Helper()
	c, err := client.New(s.url, s.key, s.clientOptions()...)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// cli runs the airlock CLI against this server and returns stdout, stderr
// and the exit code.
func (s *server) cli(ctx context.Context, args ...string) (string, string, int) {
	s.t.Helper()
	cmd := s.command(ctx, s.bins.airlock, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+s.url, "AIRLOCK_API_KEY="+s.key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		s.t.Fatalf("run airlock %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// cleanup deletes every sandbox the test left, with a fresh server if needed,
// then checks the host holds nothing of them.
func (s *server) cleanup() {
	t := s.t
	// A server built with the race detector (--race-servers) reports a
	// race on its stderr and goes on: the test fails on it here.
	if s.log != nil {
		if log := s.log.String(); strings.Contains(log, "WARNING: DATA RACE") {
			report := strings.SplitN(log[strings.Index(log, "WARNING: DATA RACE"):], "\n", 61)
			t.Errorf("the server reported a data race:\n%s", strings.Join(report[:min(len(report), 60)], "\n"))
		}
	}
	if t.Failed() && s.log != nil {
		t.Logf("server log (its last 200 lines but the access log's; all of it in %s):\n%s",
			keepLog(t, s.log.String()), tail(withoutAccessLog(s.log.String()), 200))
	}
	if !s.running() {
		s.cfg.crashAt = ""
		s.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client()
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil {
		t.Errorf("cleanup: list sandboxes: %v", err)
	}
	for _, sb := range list.Sandboxes {
		id := model.SandboxID(sb.ID)
		if sb.State == string(model.StateDeleting) || sb.State == string(model.StateDeleted) {
			continue
		}
		if _, err := c.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("cleanup: delete %s: %v", sb.ID, err)
		}
	}
	for _, sb := range list.Sandboxes {
		s.waitState(ctx, model.SandboxID(sb.ID), model.StateDeleted)
	}
	// Volumes (of the admin's project) once nothing mounts them: a
	// volume's filesystem stays mounted on the host while it exists.
	if vols, err := c.ListVolumes(ctx); err != nil {
		t.Errorf("cleanup: list volumes: %v", err)
	} else {
		for _, v := range vols.Volumes {
			ref, err := model.ParseVolumeRef(v.ID)
			if err == nil {
				_, err = c.DeleteVolume(ctx, ref)
			}
			if err != nil {
				t.Errorf("cleanup: delete volume %s: %v", v.ID, err)
			}
		}
	}
	s.stop()
	ids := make([]model.SandboxID, 0, len(list.Sandboxes))
	for _, sb := range list.Sandboxes {
		ids = append(ids, model.SandboxID(sb.ID))
	}
	s.inNetns(func() { assertNoLeftovers(t, s.dataDir, ids, true) })
}

// cliJSON runs `airlock -o json ARGS…` and decodes its stdout into v,
// failing the test on a non-zero exit or undecodable output.
func (s *server) cliJSON(ctx context.Context, v any, args ...string) {
	s.t.Helper()
	stdout, stderr, code := s.cli(ctx, append([]string{"-o", "json"}, args...)...)
	if code != 0 || json.Unmarshal([]byte(stdout), v) != nil {
		s.t.Fatalf("airlock %v: exit %d\n%s\n%s", args, code, stdout, stderr)
	}
}

// waitState polls until the sandbox reaches state.
func (s *server) waitState(ctx context.Context, id model.SandboxID, state model.SandboxState) apiv1.Sandbox {
	s.t.Helper()
	c := s.client()
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err == nil && sb.State == string(state) {
			return sb
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("sandbox %s did not become %s (last: %+v, err %v)", id, state, sb, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// assertNoLeftovers checks that nothing of any sandbox remains on the host:
// no mount under the data dir, no sandbox state dir, no container in any
// runtime's state, no cgroup of the given sandboxes.
func assertNoLeftovers(t *testing.T, dataDir string, ids []model.SandboxID, serverStopped bool) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's shared agent filesystem stays mounted while the server
	// runs (and for sandboxes that outlive it): one mount at most, however
	// often the server restarted. A server that stopped with no sandbox
	// left has unmounted it.
	agentFS := map[string]int{}
	for _, line := range strings.Split(string(mounts), "\n") {
		if !strings.Contains(line, filepath.Join(dataDir, "runtime")) || !strings.Contains(line, "/sandboxes/") {
			continue
		}
		if fields := strings.Fields(line); !serverStopped && len(fields) > 4 && filepath.Base(fields[4]) == ".agentfs" {
			if agentFS[fields[4]]++; agentFS[fields[4]] > 1 {
				t.Errorf("shared agent filesystem mounted more than once: %s", line)
			}
			continue
		}
		t.Errorf("leaked mount: %s", line)
	}
	for _, rt := range []string{"runc", "crun", "runsc"} {
		dir := filepath.Join(dataDir, "runtime", rt, "sandboxes")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != ".agentfs" || serverStopped {
				t.Errorf("leaked sandbox state dir %s/%s", dir, e.Name())
			}
		}
		state := filepath.Join(dataDir, "runtime", rt, "state")
		entries, _ = os.ReadDir(state)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "sbx_") {
				t.Errorf("leaked %s container %s", rt, e.Name())
			}
		}
	}
	for _, cg := range sandboxCgroups(ids) {
		t.Errorf("leaked cgroup %s", cg)
	}
	// QEMU microVMs: a directory per sandbox, a QEMU process per VM.
	vmDirs, _ := filepath.Glob(filepath.Join(dataDir, "runtime", "qemu", "sbx_*"))
	for _, d := range vmDirs {
		t.Errorf("leaked VM state dir %s", d)
	}
	for _, id := range ids {
		if out, _ := exec.Command("pgrep", "-f", "guest="+id.String()).Output(); len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("leaked QEMU of %s: pid %s", id, strings.TrimSpace(string(out)))
		}
	}
	assertNoNetworkLeftovers(t, dataDir, ids, true)
	if serverStopped {
		// A server that stopped with no sandbox removed its nftables table.
		if c, err := nftables.New(); err == nil {
			if _, err := nftrules.Sandboxes(c); !errors.Is(err, nftrules.ErrNoTable) {
				t.Errorf("the nftables table %s is left after the server stopped with no sandbox (%v)", nftrules.TableName, err)
			}
			c.CloseLasting()
		}
		// Nothing at all stays mounted under a data dir whose server
		// stopped with no sandbox: not runsc's null-netns pin, not a netns.
		for _, line := range strings.Split(string(mounts), "\n") {
			if fields := strings.Fields(line); len(fields) > 4 && strings.HasPrefix(fields[4], dataDir+"/") {
				t.Errorf("leaked mount after the server stopped: %s", line)
			}
		}
	}
	lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if devs, err := rootfs.LoopsReleased(lctx, dataDir); err != nil {
		t.Errorf("leaked loop devices: %+v (%v)", devs, err)
	}
}

// assertNoNetworkLeftovers checks that no sandbox network is left: no
// netns or allocation file in the pool's directory, no mount of one, no
// host veth of the given sandboxes, no nftables set member of theirs; with
// all, no file of any sandbox in the pool's directory.
func assertNoNetworkLeftovers(t *testing.T, dataDir string, ids []model.SandboxID, all bool) {
	t.Helper()
	dir := filepath.Join(dataDir, "netns")
	if all {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			t.Errorf("leaked sandbox network file %s/%s", dir, e.Name())
		}
	}
	for _, id := range ids {
		for _, f := range []string{id.String(), id.String() + ".slot"} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				t.Errorf("leaked sandbox network file %s/%s", dir, f)
			}
		}
	}
	for _, id := range ids {
		name := sandboxnet.HostIfName(id)
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("leaked veth %s of %s", name, id)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Errorf("nftables: %v", err)
		return
	}
	defer c.CloseLasting()
	members, err := nftrules.Sandboxes(c)
	if err != nil && !errors.Is(err, nftrules.ErrNoTable) {
		t.Errorf("read the nftables set: %v", err)
	}
	for _, id := range ids {
		if slices.Contains(members, sandboxnet.HostIfName(id)) {
			t.Errorf("leaked nftables set member %s of %s", sandboxnet.HostIfName(id), id)
		}
	}
}

// sandboxCgroups lists the cgroups of the given sandboxes that still exist,
// in every mounted hierarchy (cgroup v1 controllers and v2).
func sandboxCgroups(ids []model.SandboxID) []string {
	var found []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/airlock")
	roots = append(roots, "/sys/fs/cgroup/airlock")
	for _, root := range roots {
		for _, id := range ids {
			p := filepath.Join(root, id.String())
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				found = append(found, p)
			}
		}
	}
	return found
}

// withoutAccessLog drops the API's access log lines ("http request"),
// which a test that polls fills the log with.
func withoutAccessLog(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `msg="http request"`) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// keepLog writes a failed test's whole server log where it outlives the
// test ($AIRLOCK_TEST_LOG_DIR, else os.TempDir()/airlock-test-logs) and
// returns the file's path.
func keepLog(t *testing.T, log string) string {
	dir := os.Getenv("AIRLOCK_TEST_LOG_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "airlock-test-logs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Sprintf("(not kept: %v)", err)
	}
	f, err := os.CreateTemp(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-*.log")
	if err != nil {
		return fmt.Sprintf("(not kept: %v)", err)
	}
	defer f.Close()
	if _, err := f.WriteString(log); err != nil {
		return fmt.Sprintf("(not kept: %v)", err)
	}
	return f.Name()
}

func tail(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// createSandbox creates a sandbox and waits for it to run.
func createSandbox(ctx context.Context, t *testing.T, c *client.Client, req apiv1.CreateSandboxRequest) apiv1.Sandbox {
	t.Helper()
	res, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	if err != nil {
		t.Fatalf("wait for create: %v", err)
	}
	if op.State != string(model.OpSucceeded) {
		t.Fatalf("create operation %s: %+v", op.State, op.Error)
	}
	sb, err := c.GetSandbox(ctx, model.SandboxID(res.Sandbox.ID))
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// execResult is a command's collected output.
type execResult struct {
	stdout, stderr string
	exitCode       int
	signal         string
}

// execIn runs a command in a sandbox through a command session and the data plane.
func execIn(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID, args ...string) execResult {
	t.Helper()
	return execReq(ctx, t, c, id, apiv1.CreateCommandRequest{Args: args})
}

// execReq is execIn with a whole command request (env, cwd, user, …).
func execReq(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID, req apiv1.CreateCommandRequest) execResult {
	t.Helper()
	args := req.Args
	cs, err := c.CreateCommand(ctx, id, req)
	if err != nil {
		t.Fatalf("create command %v: %v", args, err)
	}
	st, err := c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
	if err != nil {
		t.Fatalf("attach %v: %v", args, err)
	}
	defer st.Close()
	var res execResult
	var out, errb strings.Builder
	for {
		ev, err := st.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("stream of %v ended without an exit event", args)
			}
			t.Fatalf("stream of %v: %v", args, err)
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			out.Write(ev.Data)
		case apiv1.EventStderr:
			errb.Write(ev.Data)
		case apiv1.EventError:
			t.Fatalf("command %v failed: %s: %s", args, ev.Err.Code, ev.Err.Message)
		case apiv1.EventExit:
			res.stdout, res.stderr, res.exitCode, res.signal = out.String(), errb.String(), ev.ExitCode, ev.Signal
			return res
		}
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
