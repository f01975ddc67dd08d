// Package eventstream writes Server-Sent Events (text/event-stream): one
// writer for the API's and the data plane's streaming routes, so that they
// answer with the same headers and event framing.
package eventstream

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Writer writes the events of one stream. Events are buffered by the
// response writer; Flush sends them.
type Writer struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

// Start sets the headers of an event stream (not cached, not sniffed, not
// buffered by a reverse proxy such as nginx), answers 200 and returns the
// stream's writer. Nothing is sent before Flush.
func Start(w http.ResponseWriter) *Writer {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &Writer{w: w, rc: http.NewResponseController(w)}
}

// Event writes one event named name, with an id field unless id is "";
// data is encoded as a single JSON line.
func (s *Writer) Event(id, name string, data any) error {
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

// Write writes p as it is: an event (or a retry field) the caller encoded.
func (s *Writer) Write(p []byte) (int, error) { return s.w.Write(p) }

// Comment writes a comment line, which keeps an idle connection open, and
// flushes.
func (s *Writer) Comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.Flush()
}

// Flush sends what was written.
func (s *Writer) Flush() error { return s.rc.Flush() }
