package template

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// A template's start and ready commands (E2B's setStartCmd and
// setReadyCmd). When a sandbox of the template starts afresh (a create, a
// wake or fork that starts its processes again) its start command is
// started in the background, as the template's user in its working
// directory with the sandbox's environment, and the sandbox counts as
// running only once its ready command exited 0. ReadyScript is that wait,
// one shell process in the guest that runs the ready command every
// ReadyPoll until it succeeds or the timeout passes (exit status
// ReadyTimeoutExit). A template build checks both the same way
// (CheckScript) before it records them.

// Bounds on the start and ready commands.
const (
	maxStartCmdBytes = 64 << 10
	// DefaultReadyTimeout is how long a sandbox's ready command may take
	// to succeed when the template sets no timeout.
	DefaultReadyTimeout = 60 * time.Second
	// MaxReadyTimeout bounds a template's ready timeout.
	MaxReadyTimeout = 10 * time.Minute
	// ReadyPoll is the pause between two runs of a ready command.
	ReadyPoll = 200 * time.Millisecond
	// ReadyTimeoutExit is the exit status of ReadyScript and CheckScript
	// when the ready command did not succeed in time (as timeout(1)'s).
	ReadyTimeoutExit = 124
	// ReadyGrace is how long after its timeout a ready wait is killed
	// when the ready command itself hangs (the script cannot stop it).
	ReadyGrace = 5 * time.Second
)

// HasStart reports whether sandboxes of the template wait for a start or
// ready command.
func (c Config) HasStart() bool { return c.StartCmd != "" || c.ReadyCmd != "" }

// ReadyTimeout is how long the ready command may take to succeed.
func (c Config) ReadyTimeout() time.Duration {
	if c.ReadyTimeoutMS <= 0 {
		return DefaultReadyTimeout
	}
	return time.Duration(c.ReadyTimeoutMS) * time.Millisecond
}

// ValidateStart checks the start and ready commands and the timeout alone
// (errors wrap model.ErrInvalid).
func (c Config) ValidateStart() error {
	for _, f := range []struct{ name, cmd string }{{"start_cmd", c.StartCmd}, {"ready_cmd", c.ReadyCmd}} {
		if len(f.cmd) > maxStartCmdBytes || strings.IndexByte(f.cmd, 0) >= 0 {
			return fmt.Errorf("%w: manifest config.%s must be at most %d bytes without NUL", model.ErrInvalid, f.name, maxStartCmdBytes)
		}
		if f.cmd != "" && strings.TrimSpace(f.cmd) == "" {
			return fmt.Errorf("%w: manifest config.%s is blank", model.ErrInvalid, f.name)
		}
	}
	if c.ReadyTimeoutMS < 0 || c.ReadyTimeoutMS > MaxReadyTimeout.Milliseconds() {
		return fmt.Errorf("%w: manifest config.ready_timeout_ms must be between 0 and %d", model.ErrInvalid, MaxReadyTimeout.Milliseconds())
	}
	if c.ReadyTimeoutMS != 0 && !c.HasStart() {
		return fmt.Errorf("%w: manifest config.ready_timeout_ms needs a start_cmd or ready_cmd", model.ErrInvalid)
	}
	return nil
}

// ReadyScript is the argv of the guest process that waits for the
// template's ready command: it runs it (in a subshell, its output kept)
// every ReadyPoll until it exits 0 (the script then exits 0) or the
// timeout passed (exit ReadyTimeoutExit, saying so on stderr). Without a
// ready command it exits 0 at once.
func (c Config) ReadyScript() []string {
	return []string{"/bin/sh", "-c", c.readyLoop()}
}

func (c Config) readyLoop() string {
	if c.ReadyCmd == "" {
		return "exit 0"
	}
	secs := strconv.FormatInt(int64((c.ReadyTimeout()+time.Second-1)/time.Second), 10)
	poll := strconv.FormatFloat(ReadyPoll.Seconds(), 'f', -1, 64)
	// The command's own line ends before ")": a trailing comment in it
	// cannot swallow the parenthesis.
	return "end=$(( $(date +%s) + " + secs + " ))\n" +
		"until (\n" + c.ReadyCmd + "\n); do\n" +
		"  if [ \"$(date +%s)\" -ge \"$end\" ]; then\n" +
		"    echo \"airlock: the template's ready command did not succeed within " + secs + "s\" >&2\n" +
		"    exit " + strconv.Itoa(ReadyTimeoutExit) + "\n" +
		"  fi\n" +
		"  sleep " + poll + "\n" +
		"done\n"
}

// StartArgv is the argv of the start command (nil without one).
func (c Config) StartArgv() []string {
	if c.StartCmd == "" {
		return nil
	}
	return []string{"/bin/sh", "-c", c.StartCmd}
}

// CheckScript is the argv a template build runs in a sandbox of the
// built template to check its start and ready commands: the start
// command in the background (its output into a file in /tmp, so that a
// daemon holding it open does not hold the check), then the ready wait;
// the start command's output so far is printed before it exits with the
// wait's status.
func (c Config) CheckScript() []string {
	var b strings.Builder
	b.WriteString("out=/tmp/.airlock-start-check.$$\n")
	if c.StartCmd != "" {
		b.WriteString("echo \"airlock: starting the template's start command\"\n")
		b.WriteString("(\n" + c.StartCmd + "\n) </dev/null >\"$out\" 2>&1 &\n")
	}
	if c.ReadyCmd != "" {
		b.WriteString("echo \"airlock: waiting for the template's ready command\"\n")
	}
	b.WriteString("(\n" + c.readyLoop() + ")\nrc=$?\n")
	b.WriteString("if [ -s \"$out\" ]; then echo \"airlock: the start command's output so far:\"; head -c 65536 \"$out\"; echo; fi\n")
	b.WriteString("if [ \"$rc\" -eq 0 ]; then echo \"airlock: the template is ready\"; fi\n")
	b.WriteString("exit \"$rc\"\n")
	return []string{"/bin/sh", "-c", b.String()}
}

// StartEnv is what the start and ready commands' environment adds to the
// sandbox's: the template user's HOME, USER and LOGNAME from its
// /etc/passwd entry (as E2B's envd gives every command of a user); none
// for root or a user the file lacks.
func (d Defaults) StartEnv() []string {
	if d.User == nil || d.User.UID == 0 || d.Home == "" {
		return nil
	}
	return []string{"HOME=" + d.Home, "USER=" + d.UserName, "LOGNAME=" + d.UserName}
}
