package envd

import (
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/keepalive"
	"github.com/airlockdev/airlock/internal/model"
)

// headerTimeout is the Connect-Timeout-Ms header of E2B's streaming calls
// (see the E2B protocol spec, §5.6); package keepalive reads the other,
// Keepalive-Ping-Interval.
const headerTimeout = "Connect-Timeout-Ms"

// maxLifetime is the longest process lifetime Airlock's API takes.
const maxLifetime = 604800 * time.Second

// Lifetime is how long a started process may run; 0 is no limit. E2B's
// envd takes a streaming call's Connect-Timeout-Ms as the lifetime of the
// process it starts.
type Lifetime time.Duration

// ParseLifetime parses a Connect-Timeout-Ms value: "" (no limit) or 1 to
// 10 digits of milliseconds. Lifetimes beyond Airlock's limit (7 days) are
// cut to it.
func ParseLifetime(h string) (Lifetime, error) {
	if h == "" {
		return 0, nil
	}
	if len(h) > 10 {
		return 0, fmt.Errorf("%s %q: more than 10 digits", headerTimeout, h)
	}
	ms, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: not a number of milliseconds", headerTimeout, h)
	}
	d := time.Duration(ms) * time.Millisecond
	return Lifetime(min(d, maxLifetime)), nil
}

// Secs is the lifetime in whole seconds for Airlock's API, rounded up (a
// lifetime under a second still limits the process).
func (l Lifetime) Secs() int {
	return int((time.Duration(l) + time.Second - 1) / time.Second)
}

// streamOptions are the per-call settings of a Start or Connect stream.
type streamOptions struct {
	lifetime  Lifetime
	keepalive time.Duration
}

func parseStreamOptions(h http.Header) (streamOptions, error) {
	life, err := ParseLifetime(h.Get(headerTimeout))
	if err != nil {
		return streamOptions{}, err
	}
	ka, err := keepalive.Parse(h.Get(keepalive.Header))
	if err != nil {
		return streamOptions{}, err
	}
	return streamOptions{lifetime: life, keepalive: ka}, nil
}

// endEvent is E2B's end event for a native exit: what Go's
// os.ProcessState says ("exit status 3", "signal: killed"), exit code −1
// for a signal, and the status as the error when the process failed.
func endEvent(exitCode int, signal string) *processpb.ProcessEvent_EndEvent {
	end := &processpb.ProcessEvent_EndEvent{ExitCode: int32(exitCode), Exited: true}
	if signal != "" {
		end.ExitCode, end.Exited = -1, false
		name := signal
		if sig, err := model.ParseSignal(signal); err == nil {
			name = syscall.Signal(sig).String()
		}
		end.Status = "signal: " + name
	} else {
		end.Status = "exit status " + strconv.Itoa(exitCode)
	}
	if end.ExitCode != 0 || !end.Exited {
		msg := end.Status
		end.Error = &msg
	}
	return end
}
