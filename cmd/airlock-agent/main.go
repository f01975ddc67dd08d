// Command airlock-agent is Airlock's guest agent: it runs inside every
// sandbox (as PID 1 or a child of it), starts processes for the host and
// streams their output, speaking the protocol of package agentproto over
// one byte stream.
//
// Usage:
//
//	airlock-agent --listen unix:/run/airlock/agent.sock [--pids-max N] [--host-peers-only] [--seal]
//	airlock-agent --listen serial:airlock.agent --poweroff-on-exit   (PID 1 of a microVM, started by guestinit)
//	airlock-agent --version
//	airlock-userns create|limit …   (argv[0]: on the host, see internal/userns)
//
// It must be built static (CGO_ENABLED=0): it runs in root filesystems
// that have no C library.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/guestboot"
	"github.com/airlockdev/airlock/internal/guestboot/guestinit"
	"github.com/airlockdev/airlock/internal/userns"
)

// version is set at link time (-ldflags "-X main.version=…"); otherwise
// the module version from the build info is used.
var version string

// stopTimeout is how long running processes get between SIGTERM and SIGKILL
// when the agent stops.
const stopTimeout = 5 * time.Second

func main() {
	// The microVM initramfs's /init is this binary: as PID 1 under that
	// name it is the guest init, which switches to the root disk and
	// executes this binary again as the agent (never returns).
	if os.Getpid() == 1 && len(os.Args) > 0 && os.Args[0] == guestboot.InitPath {
		guestinit.Main()
		os.Exit(1)
	}
	// The host's runc and crun runtimes run this binary (on the host, as
	// a sandbox's own host uid) to make the sandbox's user namespace.
	if len(os.Args) > 0 && os.Args[0] == userns.HelperName {
		userns.Main()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// powerOff ends a VM whose init the agent is (--poweroff-on-exit): an
// exiting init would panic the kernel; QEMU runs with -no-reboot and exits.
func powerOff(code int, stderr io.Writer) {
	if os.Getpid() != 1 {
		return
	}
	fmt.Fprintf(stderr, "airlock-agent: PID 1 exiting (code %d): powering off\n", code)
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(stderr, "airlock-agent: power off: %v\n", err)
	}
}

func agentVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func run(args []string, stdout, stderr io.Writer) int {
	// Before anything else: a workload process (root, same user) must not
	// ptrace the agent or read its memory, environment or descriptors
	// through /proc. Non-dumpable processes allow that only to holders of
	// CAP_SYS_PTRACE, which a sandbox never has. The spawn helper too:
	// it holds the workload cgroup's descriptor until it execs.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "airlock-agent: prctl(PR_SET_DUMPABLE, 0): %v\n", err)
		return 1
	}
	if len(args) > 0 && args[0] == agent.SpawnCommand {
		return agent.SpawnMain(args[1:])
	}
	fs := flag.NewFlagSet("airlock-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "where to accept the host's connections: unix:/path/to/socket, or in a VM a virtio-serial port, serial:/dev/vportNpM or serial:PORT-NAME (e.g. serial:airlock.agent)")
	pidsMax := fs.Int64("pids-max", 0, "if > 0, start every process in a child pids cgroup with this pids.max (for gVisor, where the host limit kills the whole sandbox)")
	memLog := fs.Bool("log-to-memory", false, "once listening, log into a 1 MiB ring served at GET /v1/logs and point stdout and stderr at /dev/null (they are a host file a guest could fill)")
	seal := fs.Bool("seal", false, "once listening, make the socket's directory and every writable cgroup mount read-only for the whole sandbox and drop CAP_SYS_ADMIN and CAP_SETPCAP (granted for this only) from all capability sets; fail if any step fails")
	hostOnly := fs.Bool("host-peers-only", false, "with unix:, accept a connection only from a process outside the agent's PID namespace (SO_PEERCRED pid 0: the host's), and close the sandbox's own processes' connections unread")
	oomAdj := fs.Int("workload-oom-score-adj", agent.DefaultWorkloadOOMScoreAdj, "the oom_score_adj (0 to 1000) every started process gets, while the agent keeps its own, so that the OOM killer takes workload processes first; 0 leaves them the agent's")
	poweroff := fs.Bool("poweroff-on-exit", false, "when PID 1 of a VM, power the machine off when the agent exits (guestinit passes it; never in a container, where reboot(2) kills the PID namespace's init)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "airlock-agent %s (protocol %d)\n", agentVersion(), agentproto.ProtocolVersion)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock-agent: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *listen == "" {
		fmt.Fprintln(stderr, "airlock-agent: --listen is required")
		return 2
	}
	addr, err := agentproto.ParseListenAddr(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "airlock-agent: --listen: %v\n", err)
		return 2
	}
	if *hostOnly && addr.Scheme != agentproto.SchemeUnix {
		fmt.Fprintln(stderr, "airlock-agent: --host-peers-only applies to a unix: listener only")
		return 2
	}
	if *oomAdj < 0 || *oomAdj > 1000 {
		fmt.Fprintln(stderr, "airlock-agent: --workload-oom-score-adj must be within 0 and 1000 (a process cannot go below the agent's value)")
		return 2
	}
	if *pidsMax < 0 {
		fmt.Fprintln(stderr, "airlock-agent: --pids-max must not be negative")
		return 2
	}
	sink := &logSink{w: stderr}
	var ring *agent.LogRing
	if *memLog {
		ring = agent.NewLogRing(logRingBytes)
		sink.set(io.MultiWriter(stderr, ring))
	}
	logger := slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
	code := 0
	if err := serve(addr, serveOptions{pidsMax: *pidsMax, seal: *seal, hostPeersOnly: *hostOnly, oomScoreAdj: *oomAdj}, logger, ring, sink); err != nil {
		logger.Error("agent failed", "err", err)
		code = 1
	}
	if *poweroff {
		powerOff(code, stderr)
	}
	return code
}

// logRingBytes is the size of the in-memory log (--log-to-memory).
const logRingBytes = 1 << 20

// logSink is the logger's writer, switched from stderr to the ring once the
// agent listens.
type logSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *logSink) set(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

// detachStdio points stdout and stderr at /dev/null: the runtime connected
// them to a host file (agent.log) that a guest could otherwise fill through
// /proc/1/fd/2.
func detachStdio() error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(null.Fd()), fd, 0); err != nil {
			return fmt.Errorf("point fd %d at /dev/null: %w", fd, err)
		}
	}
	return nil
}

// serveOptions are the flags serve acts on.
type serveOptions struct {
	pidsMax       int64
	seal          bool
	hostPeersOnly bool
	oomScoreAdj   int
}

// stopSignals returns the signals that stop the agent: SIGTERM and SIGINT,
// unless it is PID 1. As PID 1 (of a sandbox's PID namespace, or of a VM)
// every signal it gets comes from its own sandbox's processes or from the
// host, and it cannot tell which (Go's os/signal gives no sender): the
// host never sends one (it stops a sandbox with SIGKILL, which the kernel
// delivers to a namespace's init only from outside it), so the agent
// ignores them and a workload's `kill -TERM 1` does nothing.
func stopSignals(pid1 bool) []os.Signal {
	if pid1 {
		return nil
	}
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT}
}

// harmlessSignals are signals the agent takes and ignores (see serve).
func harmlessSignals(pid1 bool) []os.Signal {
	sigs := []os.Signal{syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1, syscall.SIGUSR2}
	if pid1 {
		sigs = append(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	return sigs
}

func serve(addr agentproto.ListenAddr, so serveOptions, logger *slog.Logger, ring *agent.LogRing, sink *logSink) error {
	pid1 := os.Getpid() == 1
	// Listen for stop signals (and, through the reaper, SIGCHLD) before
	// anything can start.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if sigs := stopSignals(pid1); len(sigs) > 0 {
		var stopSig context.CancelFunc
		ctx, stopSig = signal.NotifyContext(ctx, sigs...)
		defer stopSig()
	}

	// Signals that must do nothing: SIGHUP (e.g. `kill -HUP 1` inside the
	// sandbox); SIGPIPE from a stderr pipe whose reader went away (a
	// restarted host): with a handler installed, writes fail with EPIPE
	// instead; SIGUSR1 and SIGUSR2, which older agents took as the host's
	// request to release and re-take their socket (now a request over the
	// host's connection); and as PID 1 SIGTERM and SIGINT (stopSignals).
	// Handlers (unlike SIG_IGN) are reset by execve, so processes still
	// get the default dispositions.
	harmless := make(chan os.Signal, 8)
	signal.Notify(harmless, harmlessSignals(pid1)...)
	defer signal.Stop(harmless)
	go func() {
		for {
			select {
			case sig := <-harmless:
				logger.Debug("ignoring signal", "signal", sig) // Debug: a workload could flood the log
			case <-ctx.Done():
				return
			}
		}
	}()

	if !pid1 {
		// Orphans of our processes are reparented to us, not to the
		// real init, and the central reaper collects them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			logger.Warn("cannot become a child subreaper; orphans will be reaped by init", "err", err)
		}
	}
	opts := agent.Options{Version: agentVersion(), Logger: logger, ReapAllChildren: true, Logs: ring, WorkloadOOMScoreAdj: so.oomScoreAdj}
	var cg agent.PidsCgroup
	if so.pidsMax > 0 {
		var err error
		cg, err = agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: so.pidsMax})
		if err != nil {
			logger.Warn("running without a pids limit for processes", "pids_max", so.pidsMax, "err", err)
		} else {
			opts.CgroupDir = cg.Dir
			logger.Info("processes run in a pids cgroup", "dir", cg.Dir, "cgroup_version", cg.Version, "pids_max", so.pidsMax)
		}
	}
	srv, err := agent.New(opts)
	if err != nil {
		return err
	}
	ln, err := agent.Listen(addr, agent.ListenOptions{HostPeersOnly: so.hostPeersOnly, Logger: logger})
	if err != nil {
		srv.Close()
		return err
	}
	if so.seal {
		if err := sealSandbox(addr, logger); err != nil {
			ln.Close()
			srv.Close()
			return err
		}
	}
	logger.Info("agent listening", "addr", addr.String(), "version", opts.Version, "protocol", agentproto.ProtocolVersion, "pid", os.Getpid(), "pid1", pid1, "host_peers_only", so.hostPeersOnly)
	if ring != nil {
		logger.Info("logging into memory from now on (GET /v1/logs)")
		sink.set(ring)
		if err := detachStdio(); err != nil {
			logger.Warn("stdout and stderr stay on the host's log file", "err", err)
		}
	}

	// Serve with a context of its own: on a stop signal, Shutdown first stops
	// the processes (so connected hosts still receive their exit events)
	// and only then closes the listener and the connections.
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(context.Background(), ln) }()
	var served bool
	select {
	case <-ctx.Done():
		logger.Info("stopping", "grace", stopTimeout)
	case err = <-serveErr:
		served = true
		logger.Error("serving stopped", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		err = errors.Join(err, serr)
	}
	if !served {
		err = errors.Join(err, <-serveErr)
	}
	if cg.Dir != "" && !pid1 {
		if rerr := cg.Remove(); rerr != nil {
			logger.Warn("leaving the workload cgroup behind", "err", rerr)
		}
	}
	if err == nil {
		logger.Info("stopped")
	}
	return err
}

// sealSandbox makes what a workload could use against the agent read-only
// (its socket's directory; the cgroup mounts, where the agent's workload
// cgroup and its pids.max live under gVisor) and then gives up the
// capabilities that did it. It runs before any workload process exists.
func sealSandbox(addr agentproto.ListenAddr, logger *slog.Logger) error {
	var dirs []string
	if addr.Scheme == agentproto.SchemeUnix {
		dirs = append(dirs, filepath.Dir(addr.Path))
	}
	sealed, err := agent.SealMounts(dirs, true)
	if err != nil {
		return fmt.Errorf("seal the sandbox: %w", err)
	}
	if err := agent.DropCapabilities(agent.SetupCapabilities); err != nil {
		return fmt.Errorf("seal the sandbox: %w", err)
	}
	logger.Info("sealed: read-only for every process, set-up capabilities dropped", "mounts", sealed)
	return nil
}
