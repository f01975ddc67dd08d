// Package nldump retries netlink dumps that the kernel interrupted.
//
// A dump (list links, addresses, routes, qdiscs, filters) runs over several
// messages; when the table changes meanwhile the kernel marks the answer
// NLM_F_DUMP_INTR, and vishvananda/netlink returns what it got together with
// netlink.ErrDumpInterrupted. The result may then be incomplete or
// inconsistent: the kernel's intent is that the caller asks again. On a host
// where other sandboxes are being made and removed at the same time this is
// an ordinary event, not a failure.
package nldump

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// Attempts is how many times Retry asks before it gives up on a table that
// keeps changing.
const Attempts = 10

// Retry calls dump until it answers without being interrupted, at most
// Attempts times with a short pause growing by a millisecond each time.
// Other errors are returned at once. When every attempt was interrupted the
// error wraps netlink.ErrDumpInterrupted and says how often it was tried;
// the partial result is never returned as if it were whole.
func Retry[T any](dump func() (T, error)) (T, error) {
	var zero T
	for i := range Attempts {
		v, err := dump()
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return zero, err
		}
		time.Sleep(time.Duration(i) * time.Millisecond)
	}
	return zero, fmt.Errorf("netlink dump interrupted %d times in a row (the table kept changing): %w", Attempts, netlink.ErrDumpInterrupted)
}
