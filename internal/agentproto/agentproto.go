// Package agentproto is the protocol between Airlock's host side (worker, data
// plane) and the guest agent that runs inside every sandbox.
//
// Transport: HTTP/2 without TLS (prior knowledge) over one byte stream — a
// Unix socket for OCI runtimes, a virtio-serial port or vsock for microVMs.
// One stream carries many concurrent requests, so the same protocol works
// where only a single connection exists (virtio-serial). Requests and
// responses are JSON; process output is a streamed response of
// newline-delimited JSON Events.
//
// Compatibility: the protocol only grows. New fields and endpoints may be
// added; existing ones keep their meaning. The host checks Info.Protocol
// against the versions it supports.
//
// Endpoints (all under /v1):
//
//	GET  /v1/info                          → Info
//	POST /v1/processes                     StartRequest → 201 ProcessStatus (409 "exists" if the ID is taken)
//	GET  /v1/processes                     → ProcessList
//	GET  /v1/processes/{id}                → ProcessStatus
//	GET  /v1/processes/{id}/output?after=N → stream of Event (NDJSON), ending after the exit event
//	POST /v1/processes/{id}/signal         SignalRequest → 204
//	…    /v1/files/…                       file endpoints: see files.go
//
// Errors are JSON Error with an HTTP status.
package agentproto

import "time"

// ProtocolVersion is the version of this protocol the code speaks.
const ProtocolVersion = 1

// Info describes a running agent.
type Info struct {
	AgentVersion string    `json:"agent_version"`
	Protocol     int       `json:"protocol"`
	Pid          int       `json:"pid"` // the agent's PID inside the guest
	StartedAt    time.Time `json:"started_at"`
}

// StartRequest starts a process. ID is chosen by the host (a model.ProcessID).
type StartRequest struct {
	ID   string   `json:"id"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"` // "NAME=value", added to the agent's environment
	Cwd  string   `json:"cwd,omitempty"` // default "/"
}

// ProcessStatus reports one process.
type ProcessStatus struct {
	ID        string     `json:"id"`
	Pid       int        `json:"pid"`
	Args      []string   `json:"args"`
	Running   bool       `json:"running"`
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
)

// Event is one item of a process's output stream. Seq starts at 1 and grows
// by one per event of that process; a client that saw Seq n resumes with
// ?after=n. The agent keeps a bounded buffer per process; when a client asks
// for events that were already dropped, the stream starts with the oldest
// kept event (a gap in Seq tells the client output was lost).
type Event struct {
	Seq      uint64 `json:"seq"`
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"`      // stdout/stderr bytes (base64 in JSON)
	ExitCode *int   `json:"exit_code,omitempty"` // exit events
	Signal   string `json:"signal,omitempty"`    // exit events: the signal that killed it
}

// SignalRequest sends a signal to a process, by name ("TERM", "KILL", "INT", "HUP", …).
type SignalRequest struct {
	Signal string `json:"signal"`
}

// Error is the body of every non-2xx response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
