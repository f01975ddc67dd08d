// Package keepalive reads the Keepalive-Ping-Interval header of E2B's
// streaming calls (the E2B protocol spec, §5.6): how often a stream that
// has nothing else to send sends a keepalive message. The process
// service's Start and Connect and the filesystem service's WatchDir take
// it.
package keepalive

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names the interval, in whole seconds.
const Header = "Keepalive-Ping-Interval"

// Default is the interval of a stream whose client sent no Header (the
// value E2B's SDKs send).
const Default = 50 * time.Second

// Bounds of the interval: a client's value is taken within them.
const (
	Min = time.Second
	Max = time.Hour
)

// Parse parses a Header value: "" is Default; a whole number of seconds
// (surrounding spaces aside) is bounded to Min … Max; anything else is an
// error.
func Parse(h string) (time.Duration, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return Default, nil
	}
	n, err := strconv.ParseUint(h, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return Max, nil // digits, more seconds than a uint64 holds
	case err != nil:
		return 0, fmt.Errorf("%s %q: not a whole number of seconds", Header, h)
	case n > uint64(Max/time.Second):
		return Max, nil
	}
	return max(time.Duration(n)*time.Second, Min), nil
}
