package agentproto

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Transport schemes of a ListenAddr.
const (
	// SchemeUnix: the agent listens on a Unix socket and serves every
	// accepted connection as its own HTTP/2 connection.
	SchemeUnix = "unix"
	// SchemeSerial: the agent opens a character device (a virtio-serial
	// port such as /dev/vport0p1, or a port found by its name, e.g.
	// "serial:airlock.agent") and serves it as one long-lived HTTP/2
	// connection, serving it again once the host has reconnected.
	SchemeSerial = "serial"
)

// maxUnixPath is the longest path a Unix socket address can hold on Linux
// (sun_path is 108 bytes including the terminating NUL).
const maxUnixPath = 107

// ListenAddr is where a guest agent accepts the host's byte stream, written
// "SCHEME:PATH" (e.g. "unix:/run/airlock/agent.sock",
// "serial:/dev/vport0p1"). Path is absolute and clean, except for a serial
// address that names a virtio-serial port instead of its device
// ("serial:airlock.agent"): then Path is the port's name (see IsPortName).
type ListenAddr struct {
	Scheme string
	Path   string
}

// String returns the address in the form ParseListenAddr accepts.
func (a ListenAddr) String() string { return a.Scheme + ":" + a.Path }

// IsPortName reports whether a serial address names a virtio-serial port
// (found through /sys/class/virtio-ports/*/name) rather than a device path.
func (a ListenAddr) IsPortName() bool {
	return a.Scheme == SchemeSerial && !strings.HasPrefix(a.Path, "/")
}

// maxPortName bounds a virtio-serial port name (QEMU's virtserialport
// name= property; the guest reads it from sysfs).
const maxPortName = 64

// validPortName reports whether s is a plausible virtio-serial port name:
// 1 to maxPortName bytes of letters, digits, '.', '_' and '-', not starting
// with '.' or '-'.
func validPortName(s string) bool {
	if s == "" || len(s) > maxPortName || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ParseListenAddr parses "SCHEME:PATH". Known schemes are SchemeUnix and
// SchemeSerial; whether an agent build implements a scheme is the agent's
// business. PATH must be absolute, clean and free of NUL bytes; a Unix
// socket path must fit in sun_path. A serial address may instead name a
// virtio-serial port: "serial:NAME", NAME made of letters, digits, '.', '_'
// and '-' (at most 64 bytes).
func ParseListenAddr(s string) (ListenAddr, error) {
	scheme, path, ok := strings.Cut(s, ":")
	if !ok {
		return ListenAddr{}, fmt.Errorf("listen address %q: want SCHEME:PATH (e.g. unix:/run/airlock/agent.sock)", textclip.Bytes(s, maxEcho))
	}
	switch scheme {
	case SchemeUnix, SchemeSerial:
	default:
		return ListenAddr{}, fmt.Errorf("listen address %q: unknown scheme %q (want %q or %q)", textclip.Bytes(s, maxEcho), textclip.Bytes(scheme, maxEcho), SchemeUnix, SchemeSerial)
	}
	if scheme == SchemeSerial && path != "" && !strings.HasPrefix(path, "/") {
		if !validPortName(path) {
			return ListenAddr{}, fmt.Errorf("listen address %q: want an absolute device path or a virtio-serial port name (letters, digits, '.', '_', '-'; at most %d bytes)", textclip.Bytes(s, maxEcho), maxPortName)
		}
		return ListenAddr{Scheme: scheme, Path: path}, nil
	}
	if path == "" || !filepath.IsAbs(path) {
		return ListenAddr{}, fmt.Errorf("listen address %q: path must be absolute", textclip.Bytes(s, maxEcho))
	}
	if strings.IndexByte(path, 0) >= 0 {
		return ListenAddr{}, fmt.Errorf("listen address %q: path contains a NUL byte", textclip.Bytes(s, maxEcho))
	}
	if filepath.Clean(path) != path {
		return ListenAddr{}, fmt.Errorf("listen address %q: path is not clean (want %q)", textclip.Bytes(s, maxEcho), filepath.Clean(path))
	}
	if path == "/" {
		return ListenAddr{}, fmt.Errorf("listen address %q: path must name a file", textclip.Bytes(s, maxEcho))
	}
	if scheme == SchemeUnix && len(path) > maxUnixPath {
		return ListenAddr{}, fmt.Errorf("listen address %q: a Unix socket path can be at most %d bytes, this one has %d", textclip.Bytes(s, maxEcho), maxUnixPath, len(path))
	}
	return ListenAddr{Scheme: scheme, Path: path}, nil
}

// maxEcho is how many bytes of a caller's value an error message quotes (textclip.Bytes).
const maxEcho = 120
