package apiv1

import (
	"net/http"
	"slices"
	"testing"
)

// TestGuestContentHeaders: the sandbox policy joins a guest's own (both
// are enforced) and sniffing is off whatever the guest said.
func TestGuestContentHeaders(t *testing.T) {
	h := http.Header{"Content-Security-Policy": {"default-src 'self'"}, "X-Content-Type-Options": {"sniff-away"}}
	GuestContentHeaders(h)
	if got := h.Values("Content-Security-Policy"); !slices.Equal(got, []string{"default-src 'self'", "sandbox"}) {
		t.Fatalf("Content-Security-Policy %q", got)
	}
	if got := h.Values("X-Content-Type-Options"); !slices.Equal(got, []string{"nosniff"}) {
		t.Fatalf("X-Content-Type-Options %q", got)
	}
	h = http.Header{}
	GuestContentHeaders(h)
	if got := h.Values("Content-Security-Policy"); !slices.Equal(got, []string{"sandbox"}) {
		t.Fatalf("no policy of the guest's: %q", got)
	}
}
