package eventstream

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStartAndEvents(t *testing.T) {
	rec := httptest.NewRecorder()
	s := Start(rec)
	if err := s.Event("7", "log", map[string]any{"text": "a\n"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Event("", "done", struct{}{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Comment("keepalive"); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || !rec.Flushed {
		t.Fatalf("status %d, flushed %v", rec.Code, rec.Flushed)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Accel-Buffering": "no"} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	want := "id: 7\nevent: log\ndata: {\"text\":\"a\\n\"}\n\nevent: done\ndata: {}\n\n: keepalive\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("stream %q, want %q", got, want)
	}
}
