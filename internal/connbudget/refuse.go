package connbudget

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// refuseQueue bounds the refused connections waiting for their answer;
// beyond it a refused connection is closed without one.
const refuseQueue = 64

// refuseTime bounds waiting for a refused connection's request head and
// writing the answer; refuseDrain bounds reading what follows the head.
const (
	refuseTime  = 200 * time.Millisecond
	refuseDrain = 20 * time.Millisecond
)

// refusedConn is a connection Accept did not admit, and why.
type refusedConn struct {
	net.Conn
	reason string
}

// refuser answers refused connections one at a time until the listener
// closes: 503 too_many_connections (the client's request, if it sent one,
// is read and dropped, so that the answer comes after it and closing does
// not reset the connection before the client reads the answer).
func (l *listener) refuser() {
	defer close(l.done)
	for {
		select {
		case c := <-l.refused:
			answerRefused(c)
		case <-l.stop:
			for {
				select {
				case c := <-l.refused:
					_ = c.Close()
				default:
					return
				}
			}
		}
	}
}

// answerRefused writes the refusal and closes c. It first waits (briefly)
// for the request's head: an HTTP client takes an answer that comes before
// its request for a broken connection.
func answerRefused(c refusedConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseTime))
	head := make([]byte, 0, 4<<10)
	for !bytes.Contains(head, []byte("\r\n\r\n")) && len(head) < cap(head) {
		n, err := c.Read(head[len(head):cap(head)])
		head = head[:len(head)+n]
		if err != nil {
			break
		}
	}
	status := apiv1.HTTPStatus(apiv1.CodeTooManyConnections)
	body, _ := json.Marshal(apiv1.Error{Code: apiv1.CodeTooManyConnections, Message: c.reason + "; close some or retry later"})
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	if err != nil {
		return
	}
	if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	// What is left of the request (a body) is read briefly, not waited for.
	_ = c.SetReadDeadline(time.Now().Add(refuseDrain))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}
