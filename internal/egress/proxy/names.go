package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
)

// target is what a Host header or an SNI names: a normalized DNS name, or an IP literal.
type target struct {
	name string     // normalized (policy.NormalizeName), "" for an address
	ip   netip.Addr // valid for an IP literal
	port uint16     // 0 when the Host header has none
}

// parseHost parses a Host header (or an HTTP/2 :authority): "name", "name:port", "1.2.3.4",
// "1.2.3.4:80", "[2001:db8::1]", "[2001:db8::1]:443". A name is normalized; an address is
// unmapped and may not carry a zone.
func parseHost(s string) (target, error) {
	if s == "" {
		return target{}, errors.New("empty host")
	}
	if len(s) > 300 {
		return target{}, errors.New("host longer than 300 bytes")
	}
	host, portStr := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return target{}, fmt.Errorf("host %q: unclosed [", s)
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return target{}, fmt.Errorf("host %q: garbage after ]", s)
			}
			portStr = rest[1:]
			if portStr == "" {
				return target{}, fmt.Errorf("host %q: empty port", s)
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return target{}, fmt.Errorf("host %q: not an IPv6 literal", s)
		}
		return withPort(target{ip: a.Unmap()}, portStr, s)
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		host, portStr = s[:i], s[i+1:]
		if portStr == "" {
			return target{}, fmt.Errorf("host %q: empty port", s)
		}
	case strings.Count(s, ":") > 1:
		return target{}, fmt.Errorf("host %q: an IPv6 literal must be in brackets", s)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return target{}, fmt.Errorf("host %q: zone not allowed", s)
		}
		return withPort(target{ip: a.Unmap()}, portStr, s)
	}
	name, err := policy.NormalizeName(host)
	if err != nil {
		return target{}, err
	}
	return withPort(target{name: name}, portStr, s)
}

func withPort(t target, portStr, orig string) (target, error) {
	if portStr == "" {
		return t, nil
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || n == 0 || portStr[0] == '+' {
		return target{}, fmt.Errorf("host %q: bad port", orig)
	}
	t.port = uint16(n)
	return t, nil
}

// maxHelloBytes bounds what peekClientHello reads: a ClientHello is one handshake message of at
// most 64 KiB plus record headers.
const maxHelloBytes = 70 << 10

var errHelloSeen = errors.New("client hello seen")

// helloInfo is what the proxy needs from a ClientHello.
type helloInfo struct {
	serverName string
	alpn       []string
}

// peekClientHello reads a TLS ClientHello from r and returns it with every byte it read, so
// that the caller can replay them (to its own TLS server, or to the upstream in a relay).
func peekClientHello(r io.Reader) (*helloInfo, []byte, error) {
	var buf bytes.Buffer
	var hello *helloInfo
	conn := &recordingConn{r: io.TeeReader(io.LimitReader(r, maxHelloBytes), &buf)}
	err := tls.Server(conn, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = &helloInfo{serverName: h.ServerName, alpn: append([]string(nil), h.SupportedProtos...)}
			return nil, errHelloSeen
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return nil, buf.Bytes(), fmt.Errorf("reading the TLS ClientHello: %w", err)
	}
	return hello, buf.Bytes(), nil
}

// recordingConn is the read-only net.Conn peekClientHello hands to crypto/tls.
type recordingConn struct{ r io.Reader }

func (c *recordingConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) LocalAddr() net.Addr              { return nil }
func (c *recordingConn) RemoteAddr() net.Addr             { return nil }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }
