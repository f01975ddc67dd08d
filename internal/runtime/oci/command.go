package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// commandTimeout bounds one short runtime command (state, kill, list, …)
// when the caller's context has no earlier deadline.
const commandTimeout = 60 * time.Second

// globalArgs are the flags that precede every subcommand. joinNetns is
// true for the create and start of a sandbox with a prepared network
// namespace (joinsNetns): runsc
// then runs its sandbox in the spec's network namespace and takes its
// interfaces, addresses and routes over (--network=sandbox); runsc
// configures its network stack at start, so start takes the same flag.
// Otherwise (every other command, the probe) --network=none: a new netns
// with loopback only.
func (r *Runtime) globalArgs(joinNetns bool) []string {
	args := []string{"--root", r.rootDir}
	if r.flavor == FlavorRunsc {
		network := "--network=none"
		if joinNetns {
			network = "--network=sandbox"
		}
		args = append(args,
			network,
			"--overlay2=none",   // writes go to our overlay's upper dir, so they persist
			"--host-uds=create", // the host must reach the agent's socket in the bind-mounted run dir
			// The agent's pids limit (--pids-max) needs gVisor's cgroup v2:
			// its v1 emulation checks a fork against one hierarchy picked in
			// map order, so most forks beyond pids.max succeed (measured: 161
			// of 300 with a limit of 24); v2 checks every controller.
			"--in-sandbox-cgroup=v2",
			// Set-user-ID programs (sudo) raise the effective ID as on
			// runc: gVisor ignores the bits without this flag, whatever the
			// spec's noNewPrivileges (docs/security.md, sudo in a sandbox).
			"--allow-suid",
		)
	}
	return args
}

// command builds an invocation of the runtime binary. On a hybrid cgroup
// host crun refuses to run while a cgroup2 hierarchy is mounted next to the
// v1 controllers, so it runs in a private mount namespace where that mount
// is gone (the namespace dies with crun; the host is untouched).
func (r *Runtime) command(ctx context.Context, sub ...string) *exec.Cmd {
	return r.commandNet(ctx, false, sub...)
}

// commandNet is command with the network mode of globalArgs.
func (r *Runtime) commandNet(ctx context.Context, joinNetns bool, sub ...string) *exec.Cmd {
	args := append(r.globalArgs(joinNetns), sub...)
	var cmd *exec.Cmd
	if r.unifiedToHide != "" {
		script := `umount -- "$1" && shift && exec "$@"`
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, "sh", r.unifiedToHide, r.binary}, args...)...)
		// Go makes the new mount namespace's mounts private before exec.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	} else {
		cmd = exec.CommandContext(ctx, r.binary, args...)
	}
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a short runtime command and returns its stdout. Errors carry
// its stderr.
func (r *Runtime) run(ctx context.Context, sub ...string) ([]byte, error) {
	return r.runNet(ctx, false, sub...)
}

// runNet is run with the network mode of globalArgs.
func (r *Runtime) runNet(ctx context.Context, joinNetns bool, sub ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, commandTimeout)
		defer cancel()
	}
	cmd := r.commandNet(ctx, joinNetns, sub...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r.log.Debug("runtime command", "args", sub, "took", time.Since(start), "err", err)
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), &commandError{args: sub, err: err, stderr: msg}
	}
	return stdout.Bytes(), nil
}

// commandError is a failed runtime command.
type commandError struct {
	args   []string
	err    error
	stderr string
}

func (e *commandError) Error() string {
	s := fmt.Sprintf("%s: %v", strings.Join(e.args, " "), e.err)
	if e.stderr != "" {
		s += ": " + e.stderr
	}
	return s
}

func (e *commandError) Unwrap() error { return e.err }

// runDetached runs `create`, whose container process inherits the
// command's stdio: stdin is /dev/null and stdout/stderr go to logFile, so no
// pipe ties the sandbox to this process. It runs in a new session so a
// terminal's signals to the server never reach the sandbox. netns is the
// prepared network namespace the sandbox joins ("" for none); runc, which
// cannot join it from the sandbox's user namespace, is started in it (see
// runcInheritsNetns).
func (r *Runtime) runDetached(ctx context.Context, logFile string, netns string, sub ...string) error {
	joinNetns := netns != ""
	log, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open agent log: %w", err)
	}
	defer log.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, commandTimeout)
		defer cancel()
	}
	cmd := r.commandNet(ctx, joinNetns, sub...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, log, log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	start := time.Now()
	if joinNetns && r.runcInheritsNetns() {
		if err = inNetns(netns, cmd.Start); err == nil {
			err = cmd.Wait()
		}
	} else {
		err = cmd.Run()
	}
	r.log.Debug("runtime command", "args", sub, "took", time.Since(start), "err", err)
	if err != nil {
		return &commandError{args: sub, err: err, stderr: errorTail(logFile)}
	}
	return nil
}

// readVersion runs `<binary> --version` and returns the version it reports.
func (r *Runtime) readVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", r.binary, err)
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", r.binary, err)
	}
	return v, nil
}

// ParseVersion extracts the version from the first line of an OCI
// runtime's --version output ("runc version 1.1.5", "crun version 1.8.1",
// "runsc version release-20240101.0").
func ParseVersion(out string) (string, error) {
	line, _, _ := strings.Cut(out, "\n")
	_, v, ok := strings.Cut(line, " version ")
	v = strings.TrimSpace(v)
	if !ok || v == "" || strings.ContainsAny(v, " \t") && len(strings.Fields(v)) > 1 {
		return "", fmt.Errorf("unrecognised version output %q", textclip.Bytes(line, maxEcho))
	}
	return v, nil
}

// ContainerState is the part of `<runtime> state` output that Airlock uses.
type ContainerState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
}

// ParseState parses the JSON printed by `<runtime> state <id>`.
func ParseState(data []byte) (ContainerState, error) {
	var st ContainerState
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		return ContainerState{}, fmt.Errorf("parse runtime state: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return ContainerState{}, fmt.Errorf("parse runtime state: trailing data")
	}
	if st.ID == "" || st.Status == "" {
		return ContainerState{}, fmt.Errorf("parse runtime state: missing id or status in %q", textclip.Bytes(string(data), maxEcho))
	}
	if st.Pid < 0 { // runsc reports -1 once stopped
		st.Pid = 0
	}
	return st, nil
}

// ParseList parses `<runtime> list --quiet`: one container ID per line.
// Names that are not sandbox IDs (e.g. probe containers) are returned
// separately.
func ParseList(out string) (ids []model.SandboxID, other []string) {
	for _, line := range strings.Split(out, "\n") {
		name := strings.TrimSpace(line)
		if name == "" {
			continue
		}
		if id, err := model.ParseSandboxID(name); err == nil {
			ids = append(ids, id)
		} else {
			other = append(other, name)
		}
	}
	return ids, other
}

// maxEcho is how many bytes of output or a value an error message quotes (textclip.Bytes).
const maxEcho = 200
