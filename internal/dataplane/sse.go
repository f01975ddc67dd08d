package dataplane

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// sseWriter writes Server-Sent Events. Events are buffered by the response
// writer; flush sends them.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

// event writes one event; data is encoded as a single JSON line.
func (s *sseWriter) event(id, name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	s.buf = s.buf[:0]
	if id != "" {
		s.buf = append(append(append(s.buf, "id: "...), id...), '\n')
	}
	s.buf = append(append(append(s.buf, "event: "...), name...), "\ndata: "...)
	s.buf = append(append(s.buf, b...), "\n\n"...)
	_, err = s.w.Write(s.buf)
	return err
}

// output writes a stdout or stderr event, {"data":"<base64>"}, without a
// JSON encoder (the hot path).
func (s *sseWriter) output(seq uint64, name string, data []byte) error {
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = strconv.AppendUint(s.buf, seq, 10)
	s.buf = append(append(append(s.buf, "\nevent: "...), name...), "\ndata: {\"data\":\""...)
	s.buf = base64.StdEncoding.AppendEncode(s.buf, data)
	s.buf = append(s.buf, "\"}\n\n"...)
	_, err := s.w.Write(s.buf)
	return err
}

// comment writes an SSE comment line, which keeps idle connections open.
func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.flush()
}

// reconnect tells the client to come back (with Last-Event-ID) after
// retryMS milliseconds, then flushes.
func (s *sseWriter) reconnect(retryMS int) error {
	if _, err := fmt.Fprintf(s.w, "retry: %d\n", retryMS); err != nil {
		return err
	}
	if err := s.event("", apiv1.EventReconnect, apiv1.ReconnectEventData{Reason: "draining", RetryMS: retryMS}); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error { return s.rc.Flush() }
