package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// Listen returns a listener for addr whose connections Serve serves, one
// HTTP/2 connection each.
//
//   - unix: a Unix socket at addr.Path. The parent directory is created; a
//     stale socket left by an earlier agent is removed (any other kind of
//     file there is an error). Many connections may be open at once.
//   - serial: not implemented yet. It is meant to return a listener whose
//     Accept yields the already-open character device as one long-lived
//     connection, and yields it again once the previous one hit EOF.
func Listen(addr agentproto.ListenAddr) (net.Listener, error) {
	switch addr.Scheme {
	case agentproto.SchemeUnix:
		return listenUnix(addr.Path)
	case agentproto.SchemeSerial:
		return nil, fmt.Errorf("listen %s: the serial transport is not implemented in this agent yet", addr)
	default:
		return nil, fmt.Errorf("listen %s: unsupported scheme %q", addr, addr.Scheme)
	}
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen unix:%s: remove stale socket: %w", path, err)
		}
	case err == nil:
		return nil, fmt.Errorf("listen unix:%s: the path exists and is not a socket (mode %s); refusing to remove it", path, fi.Mode())
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	return ln, nil
}
