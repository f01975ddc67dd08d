package envd

import (
	"context"
	"net/http"
	"testing"
)

// TestAbortIfGone: a stream whose sandbox was deleted breaks the
// connection (the SDK then asks /health and reports the kill); any other
// failure, or a client that went away, does not.
func TestAbortIfGone(t *testing.T) {
	aborts := func(ctx context.Context, o relayOptions) (aborted bool) {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				aborted = true
			}
		}()
		abortIfGone(ctx, o)
		return false
	}
	gone := func(context.Context) bool { return true }
	alive := func(context.Context) bool { return false }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		o    relayOptions
		want bool
	}{
		{"deleted", context.Background(), relayOptions{gone: gone}, true},
		{"still there", context.Background(), relayOptions{gone: alive}, false},
		{"no check", context.Background(), relayOptions{}, false},
		{"client gone", canceled, relayOptions{gone: gone}, false},
	} {
		if got := aborts(tc.ctx, tc.o); got != tc.want {
			t.Errorf("%s: aborted %v, want %v", tc.name, got, tc.want)
		}
	}
}
