package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// sseWriter writes Server-Sent Events and flushes each one.
type sseWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

// event writes one event; data is encoded as a single JSON line.
func (s *sseWriter) event(id, name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	if id != "" {
		if _, err := fmt.Fprintf(s.w, "id: %s\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// comment writes an SSE comment line, which keeps idle connections open.
func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}
