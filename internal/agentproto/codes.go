package agentproto

// Error codes (Error.Code) the agent returns. Codes are stable; new ones may
// be added.
const (
	// CodeInvalidRequest (400): malformed JSON, unknown fields, a bad ID,
	// empty args, a bad signal name or query parameter.
	CodeInvalidRequest = "invalid_request"
	// CodeExecFailed (400): the process could not be started (executable
	// not found or not executable, bad working directory). No record is kept.
	CodeExecFailed = "exec_failed"
	// CodeExists (409): a process with that ID exists (running or exited
	// and still retained).
	CodeExists = "exists"
	// CodeNotFound (404): no process with that ID.
	CodeNotFound = "not_found"
	// CodeNotRunning (409): the process has already exited.
	CodeNotRunning = "not_running"
	// CodeNoRoute (404/405): the agent does not know this endpoint or method
	// (e.g. an older agent).
	CodeNoRoute = "no_route"
	// CodeShuttingDown (503): the agent is stopping.
	CodeShuttingDown = "shutting_down"
	// CodeInternal (500): anything else.
	CodeInternal = "internal"
)

// More error codes (protocol 2).
const (
	// CodeNoStdin (409): the process was started without Stdin, or its
	// stdin has been closed.
	CodeNoStdin = "no_stdin"
	// CodeNoPTY (409): resize of a process that has no terminal.
	CodeNoPTY = "no_pty"
	// CodeBusy (429): too many concurrent output streams of one process.
	CodeBusy = "busy"
	// CodeNotSupported (409): the agent cannot do this on its transport
	// (e.g. release a listener that is not a Unix socket).
	CodeNotSupported = "not_supported"
)
