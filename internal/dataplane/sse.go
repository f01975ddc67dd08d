package dataplane

import (
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/eventstream"
)

// sseWriter is an attach stream: the shared event stream writer, plus the
// data plane's own output and reconnect events.
type sseWriter struct {
	*eventstream.Writer
	buf []byte
}

// output writes a stdout or stderr event, {"data":"<base64>"}, without a
// JSON encoder (the hot path).
func (s *sseWriter) output(seq uint64, name string, data []byte) error {
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = strconv.AppendUint(s.buf, seq, 10)
	s.buf = append(append(append(s.buf, "\nevent: "...), name...), "\ndata: {\"data\":\""...)
	s.buf = base64.StdEncoding.AppendEncode(s.buf, data)
	s.buf = append(s.buf, "\"}\n\n"...)
	_, err := s.Write(s.buf)
	return err
}

// reconnect tells the client to come back (with Last-Event-ID) after
// retryMS milliseconds, then flushes.
func (s *sseWriter) reconnect(retryMS int) error {
	if _, err := fmt.Fprintf(s, "retry: %d\n", retryMS); err != nil {
		return err
	}
	if err := s.Event("", apiv1.EventReconnect, apiv1.ReconnectEventData{Reason: "draining", RetryMS: retryMS}); err != nil {
		return err
	}
	return s.Flush()
}
