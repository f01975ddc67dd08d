package agent

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// guestSystem applies the parts of a GuestConfig that change the machine.
// linuxGuest is the real one; tests record the calls instead.
type guestSystem interface {
	SetHostname(name string) error
	AddEntropy(b []byte) error
	SetTime(t time.Time) error
	ConfigureNetwork(n guestNetwork) error
}

// guestNetwork is a validated agentproto.GuestNetwork.
type guestNetwork struct {
	iface   string
	addr    netip.Prefix
	gateway netip.Addr // invalid: no default route
	dns     []netip.Addr
}

// maxHostname is the kernel's limit (HOST_NAME_MAX).
const maxHostname = 64

// validHostname reports whether s is a host name: dot-separated labels of
// letters, digits and '-', each 1 to 63 bytes, not starting or ending with
// '-'; at most maxHostname bytes.
func validHostname(s string) bool {
	if s == "" || len(s) > maxHostname {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// validIfaceName reports whether s can name a network interface (IFNAMSIZ).
func validIfaceName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\x00")
}

// parseGuestNetwork validates n.
func parseGuestNetwork(n agentproto.GuestNetwork) (guestNetwork, error) {
	g := guestNetwork{iface: n.Interface}
	if g.iface == "" {
		g.iface = agentproto.DefaultGuestInterface
	}
	if !validIfaceName(g.iface) {
		return g, fmt.Errorf("network interface %q: not an interface name", textclip.Bytes(g.iface, maxEcho))
	}
	var err error
	if g.addr, err = netip.ParsePrefix(n.Address); err != nil {
		return g, fmt.Errorf("network address: want a prefix such as 10.0.0.2/30: %w", err)
	}
	if n.Gateway != "" {
		if g.gateway, err = netip.ParseAddr(n.Gateway); err != nil {
			return g, fmt.Errorf("network gateway: %w", err)
		}
		if g.gateway.Is4() != g.addr.Addr().Is4() {
			return g, fmt.Errorf("network gateway %s and address %s are of different IP versions", g.gateway, g.addr)
		}
	}
	for _, d := range n.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return g, fmt.Errorf("network dns: %w", err)
		}
		g.dns = append(g.dns, a)
	}
	return g, nil
}

// validateGuestConfig checks c before anything is applied.
func validateGuestConfig(c agentproto.GuestConfig) (*guestNetwork, error) {
	if c.Hostname != "" && !validHostname(c.Hostname) {
		return nil, fmt.Errorf("hostname %q: want dot-separated labels of letters, digits and '-' (at most %d bytes)", textclip.Bytes(c.Hostname, maxEcho), maxHostname)
	}
	for _, kv := range c.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("env entry %q: want NAME=value without NUL bytes", textclip.Bytes(kv, maxEcho))
		}
	}
	if n := len(c.Entropy); n > 0 && (n < agentproto.MinEntropyBytes || n > agentproto.MaxEntropyBytes) {
		return nil, fmt.Errorf("entropy: %d bytes, want %d to %d", n, agentproto.MinEntropyBytes, agentproto.MaxEntropyBytes)
	}
	if c.TimeUnixNano < 0 {
		return nil, errors.New("time_unix_nano must not be negative")
	}
	if c.PidsMax < 0 {
		return nil, errors.New("pids_max must not be negative")
	}
	if c.Network == nil {
		return nil, nil
	}
	n, err := parseGuestNetwork(*c.Network)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// baseEnv is the environment processes start from: the agent's (or
// Options.Env), with every GuestConfig env merged over it.
func (s *Server) baseEnv() []string {
	s.envMu.Lock()
	defer s.envMu.Unlock()
	return s.env
}

// configureGuest applies c: the clock first (so the times of what follows
// are right), then entropy, host name, network and environment.
func (s *Server) configureGuest(c agentproto.GuestConfig) error {
	netCfg, err := validateGuestConfig(c)
	if err != nil {
		return invalidRequest("%v", err)
	}
	s.guestMu.Lock()
	defer s.guestMu.Unlock()
	if c.TimeUnixNano > 0 {
		if err := s.guest.SetTime(time.Unix(0, c.TimeUnixNano)); err != nil {
			return internalErr("set the clock: %w", err)
		}
	}
	if len(c.Entropy) > 0 {
		if err := s.guest.AddEntropy(c.Entropy); err != nil {
			return internalErr("add entropy: %w", err)
		}
	}
	if c.Hostname != "" {
		if err := s.guest.SetHostname(c.Hostname); err != nil {
			return internalErr("set the host name: %w", err)
		}
	}
	if netCfg != nil {
		if err := s.guest.ConfigureNetwork(*netCfg); err != nil {
			return internalErr("configure the network: %w", err)
		}
	}
	if c.PidsMax > 0 {
		if s.cgroupDir == "" {
			return invalidRequest("pids_max: the agent runs processes in no cgroup (it was started without --pids-max)")
		}
		if err := setPidsMax(s.cgroupDir, c.PidsMax); err != nil {
			return internalErr("set the pids limit: %w", err)
		}
	}
	if len(c.Env) > 0 {
		s.envMu.Lock()
		// SetEnv returns a new slice: a process start may be using the old one.
		s.env = model.SetEnv(s.env, c.Env)
		s.envMu.Unlock()
	}
	s.logger.Info("guest configured", "hostname", c.Hostname, "env_entries", len(c.Env), "entropy_bytes", len(c.Entropy),
		"time_set", c.TimeUnixNano > 0, "network", netCfg != nil, "pids_max", c.PidsMax)
	return nil
}

func (s *Server) handleGuestConfig(w http.ResponseWriter, r *http.Request) {
	var c agentproto.GuestConfig
	if !decodeBody(w, r, &c) {
		return
	}
	if err := s.configureGuest(c); err != nil {
		var se *startError
		if errors.As(err, &se) {
			writeError(w, se.status, se.code, se.Error())
			return
		}
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
