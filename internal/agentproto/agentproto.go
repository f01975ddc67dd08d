// Package agentproto is the protocol between Airlock's host side (worker, data
// plane) and the guest agent that runs inside every sandbox.
//
// Transport: HTTP/2 without TLS (prior knowledge) over one byte stream — a
// Unix socket for OCI runtimes, a virtio-serial port or vsock for microVMs.
// One stream carries many concurrent requests, so the same protocol works
// where only a single connection exists (virtio-serial). Requests and
// responses are JSON; process output is a streamed response of Events,
// binary frames (see frame.go) when the host asks for FramesMediaType in
// Accept (protocol 2), newline-delimited JSON otherwise (protocol 1).
//
// Compatibility: the protocol only grows. New fields and endpoints may be
// added; existing ones keep their meaning. The host checks Info.Protocol
// against the range of versions it supports on every (re)connect, and
// Info.Features tells what an agent of a supported version can do (agents
// restored from old snapshots report fewer features).
//
// Endpoints (all under /v1):
//
//	GET  /v1/info                          → Info
//	POST /v1/processes                     StartRequest → 201 ProcessStatus (409 "exists" if the ID is taken)
//	GET  /v1/processes                     → ProcessList
//	GET  /v1/processes/{id}                → ProcessStatus
//	GET  /v1/processes/{id}/wait           → ProcessStatus once the process has exited (the request's context bounds the wait)
//	GET  /v1/processes/{id}/output?after=N → stream of Event, ending after the exit event
//	POST /v1/processes/{id}/signal         SignalRequest → 204
//	POST /v1/processes/{id}/stdin[?close=1] raw body appended to the process's stdin → 204 (close=1: close stdin after the body)
//	POST /v1/processes/{id}/resize         ResizeRequest → 204 (PTY processes)
//	GET  /v1/logs                          → the agent's newest log lines (text/plain)
//	GET  /v1/usage                         → GuestUsage (FeatureUsage; what a VM's host cannot see)
//	PUT  /v1/guest                         GuestConfig → 204 (VM agents; see guest.go)
//	POST /v1/listener/release              → 204, then the agent closes its Unix socket and every connection on it until RelistenTrigger (409 "not_supported" on other transports)
//	…    /v1/files/…                       file endpoints: see files.go
//
// Output flow control: while an output stream is open, the agent never
// drops events that stream has not yet written; a full buffer stops the
// agent from reading the process's output (back-pressure to the writer). A
// stream that takes nothing for the agent's stall timeout is reset and no
// longer holds the writer back. Without open streams, the oldest events are
// dropped when the buffer is full, and the next stream that asks for them
// gets a "gap" event saying what was lost.
//
// Errors are JSON Error with an HTTP status.
package agentproto

import (
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// ProtocolVersion is the version of this protocol the code speaks.
// Version 1: NDJSON output, no stdin, PTY, wait or gap events.
// Version 2: binary output frames, gap events, stdin, PTY, user, timeout,
// wait, Info.Features.
const ProtocolVersion = 2

// Features an agent may report in Info.Features.
const (
	FeatureFrames  = "frames"  // binary output frames (FramesMediaType)
	FeatureGap     = "gap"     // explicit gap events instead of silent loss
	FeatureStdin   = "stdin"   // StartRequest.Stdin and the stdin endpoint
	FeaturePTY     = "pty"     // StartRequest.PTY and the resize endpoint
	FeatureUser    = "user"    // StartRequest.User
	FeatureTimeout = "timeout" // StartRequest.TimeoutMillis
	FeatureWait    = "wait"    // the wait endpoint
	FeatureHold    = "hold"    // StartRequest.HoldOutput
	FeatureLogs    = "logs"    // GET /v1/logs
	// FeatureListenerRelease: POST /v1/listener/release and
	// RelistenTrigger (agents before it released their socket on SIGUSR1
	// and listened again on SIGUSR2, which the workload could send too).
	FeatureListenerRelease = "listener-release"
	// FeatureUsage: GET /v1/usage.
	FeatureUsage = "usage"
)

// GuestUsage is the guest's own view of its memory and root filesystem,
// for a VM whose host sees neither (internal/usage asks for it). Inside a
// container it would show the host's memory: the host reads the
// container's cgroup instead.
type GuestUsage struct {
	MemTotal     int64 `json:"mem_total"`     // /proc/meminfo MemTotal, bytes
	MemAvailable int64 `json:"mem_available"` // MemAvailable
	MemCache     int64 `json:"mem_cache"`     // Cached + Buffers
	DiskTotal    int64 `json:"disk_total"`    // statfs("/"): blocks × size
	DiskUsed     int64 `json:"disk_used"`     // (blocks − free) × size
}

// RelistenTrigger is the file that the host creates in the directory of a
// released agent's Unix socket (after `runsc restore`, or when a
// checkpoint did not happen) to make the agent listen again: the agent
// removes it and listens. The directory is read-only for the sandbox, so
// only the host can create it.
const RelistenTrigger = "relisten"

// Info describes a running agent.
type Info struct {
	AgentVersion string    `json:"agent_version"`
	Protocol     int       `json:"protocol"`
	Features     []string  `json:"features,omitempty"` // protocol 2+
	Pid          int       `json:"pid"`                // the agent's PID inside the guest
	StartedAt    time.Time `json:"started_at"`
}

// HasFeature reports whether the agent reported feature f.
func (i Info) HasFeature(f string) bool {
	for _, x := range i.Features {
		if x == f {
			return true
		}
	}
	return false
}

// StartRequest starts a process. ID is chosen by the host (a model.ProcessID).
type StartRequest struct {
	ID   string   `json:"id"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"` // "NAME=value", added to the agent's environment
	Cwd  string   `json:"cwd,omitempty"` // default "/"
	// Stdin keeps the process's stdin open for the stdin endpoint; without
	// it stdin reads EOF at once.
	Stdin bool `json:"stdin,omitempty"`
	// PTY runs the process on a new pseudo-terminal (stdin, stdout and
	// stderr are the terminal; output arrives as stdout events).
	PTY *WindowSize `json:"pty,omitempty"`
	// User runs the process with these IDs (default: the agent's, root).
	User *User `json:"user,omitempty"`
	// TimeoutMillis, if > 0, kills the process's group with SIGKILL that
	// long after it started; its exit event then says timed_out.
	TimeoutMillis int64 `json:"timeout_ms,omitempty"`
	// HoldOutput treats the process as attached from its first instruction
	// until the first output stream opens (or the agent's stall timeout
	// passes): output is held back, never dropped, in the moment between
	// a start and the attach that asked for it.
	HoldOutput bool `json:"hold_output,omitempty"`
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// User is a numeric user and group inside the sandbox.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ResizeRequest changes a PTY process's terminal size.
type ResizeRequest = WindowSize

// ProcessStatus reports one process.
type ProcessStatus struct {
	ID        string     `json:"id"`
	Pid       int        `json:"pid"`
	Args      []string   `json:"args"`
	Running   bool       `json:"running"`
	PTY       bool       `json:"pty,omitempty"`
	Stdin     bool       `json:"stdin,omitempty"`     // stdin is open for writing
	TimedOut  bool       `json:"timed_out,omitempty"` // killed because its timeout passed
	ExitCode  *int       `json:"exit_code,omitempty"` // set once exited; -1 if killed by a signal
	Signal    string     `json:"signal,omitempty"`    // e.g. "KILL" if killed by a signal
	StartedAt time.Time  `json:"started_at"`
	ExitedAt  *time.Time `json:"exited_at,omitempty"`
}

// ProcessList is the response of GET /v1/processes.
type ProcessList struct {
	Processes []ProcessStatus `json:"processes"`
}

// Event types.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventGap    = "gap"
)

// Event is one item of a process's output stream. Seq starts at 1 and grows
// by one per event of that process; a client that saw Seq n resumes with
// ?after=n. The agent keeps a bounded buffer per process; when a client asks
// for events that were already dropped, the stream starts with a gap event
// whose Seq is the last dropped one and whose Gap says what was lost, then
// the oldest kept event.
type Event struct {
	Seq      uint64 `json:"seq"`
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"`      // stdout/stderr bytes (base64 in JSON)
	ExitCode *int   `json:"exit_code,omitempty"` // exit events
	Signal   string `json:"signal,omitempty"`    // exit events: the signal that killed it
	TimedOut bool   `json:"timed_out,omitempty"` // exit events: killed by its timeout
	Gap      *Gap   `json:"gap,omitempty"`       // gap events
}

// Gap describes output that was dropped before this reader could read it.
type Gap struct {
	Events      uint64 `json:"events"`       // how many events were skipped
	StdoutBytes uint64 `json:"stdout_bytes"` // stdout bytes in them
	StderrBytes uint64 `json:"stderr_bytes"` // stderr bytes in them
	// Exact is false when the agent no longer knows the size of every
	// skipped event; the byte counts are then a lower bound.
	Exact bool `json:"exact"`
}

// SignalRequest sends a signal to a process, by name ("TERM", "KILL", "INT",
// "HUP", …, with or without "SIG") or by number ("9").
type SignalRequest struct {
	Signal string `json:"signal"`
}

// Error is the body of every non-2xx response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ParseCloseParam parses the close query parameter of a stdin request:
// "", "0" or "false" keep stdin open, "1" or "true" close it after the body.
func ParseCloseParam(v string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("close=%q: want 1 or 0", textclip.Bytes(v, maxEcho))
}
