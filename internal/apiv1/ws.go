package apiv1

// The WebSocket protocol of WebSocketPath (GET /data/v1/processes/{id}/ws,
// same attachment token as attach; ?after=N resumes after sequence N, like
// Last-Event-ID). Package dataplane documents it in full.
//
// Server → client:
//   - binary: output. Byte 0 is WSStdout or WSStderr, bytes 1–8 the
//     event's sequence number (big-endian uint64), the rest the bytes.
//   - text: a WSEvent, JSON: exit, gap, error or reconnect.
//
// Client → server:
//   - binary: stdin bytes, written to the process in order.
//   - text: a WSClientMessage, JSON: resize, signal or eof.

// Kinds of output in byte 0 of a binary server message.
const (
	WSStdout byte = 1
	WSStderr byte = 2
)

// WSOutputHeader is the length of a binary output message's header.
const WSOutputHeader = 9

// Types of client → server text messages.
const (
	WSResize = "resize" // {"type":"resize","rows":R,"cols":C}
	WSSignal = "signal" // {"type":"signal","signal":"INT"}
	WSEOF    = "eof"    // {"type":"eof"}: close stdin after what was sent
)

// WSEvent is a server → client text message. Type is EventExit, EventGap,
// EventError or EventReconnect; the fields of the matching SSE event data
// are inlined. Seq is the event's sequence number (exit, gap), or the last
// one sent (reconnect: resume with ?after=Seq).
type WSEvent struct {
	Type string `json:"type"`
	Seq  uint64 `json:"seq,omitempty"`
	*ExitEventData
	*GapEventData
	*Error
	*ReconnectEventData
	// Request is set on an error about one client message ("stdin",
	// "resize", "signal", "eof" or the unknown type): the session goes on.
	// An error without it is final: the server then closes the socket.
	Request string `json:"request,omitempty"`
}

// WSClientMessage is a client → server text message.
type WSClientMessage struct {
	Type   string `json:"type"`
	Rows   int    `json:"rows,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Signal string `json:"signal,omitempty"`
}
