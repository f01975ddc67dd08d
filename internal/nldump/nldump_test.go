package nldump

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetry(t *testing.T) {
	other := errors.New("permission denied")
	tests := []struct {
		name      string
		errs      []error // one per call; past the end: success
		wantCalls int
		wantErr   error
	}{
		{name: "first try", wantCalls: 1},
		{name: "interrupted twice", errs: []error{netlink.ErrDumpInterrupted, fmt.Errorf("wrapped: %w", netlink.ErrDumpInterrupted)}, wantCalls: 3},
		{name: "other error at once", errs: []error{other}, wantCalls: 1, wantErr: other},
		{name: "interrupted then other", errs: []error{netlink.ErrDumpInterrupted, other}, wantCalls: 2, wantErr: other},
		{name: "always interrupted", errs: repeat(netlink.ErrDumpInterrupted, Attempts+5), wantCalls: Attempts, wantErr: netlink.ErrDumpInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := Retry(func() ([]int, error) {
				calls++
				if calls <= len(tt.errs) {
					return []int{1}, tt.errs[calls-1] // a partial result with the error
				}
				return []int{1, 2, 3}, nil
			})
			if calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("a failed dump returned %v; the partial result must not pass as whole", got)
				}
				return
			}
			if err != nil || len(got) != 3 {
				t.Fatalf("got %v, %v; want the whole result", got, err)
			}
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
