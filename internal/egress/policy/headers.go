package policy

import (
	"fmt"
	"slices"

	"github.com/airlockdev/airlock/internal/model"
)

// Headers are a sandbox's request header rules as its policy carries them:
// which hosts get which headers, the header names in clear (for display),
// the rules themselves (names and values, which may be credentials or name
// the project's secrets) sealed by internal/egress/secrets, which alone
// opens them. The policy never decides on them: Compile carries them to
// the proxy, which injects them into intercepted HTTPS requests to their
// hosts once a request is allowed.
type Headers struct {
	Hosts  []HeaderHost `json:"hosts"`
	Sealed []byte       `json:"sealed"`
}

// HeaderHost is one host pattern of Headers and the names of the headers
// its requests get.
type HeaderHost struct {
	Host  string   `json:"host"`
	Names []string `json:"names"`
}

// Limits of Headers (secrets.ParseHeaderRules enforces the finer ones).
const (
	MaxHeaderHosts  = 32
	MaxHeaderSealed = 64 << 10
)

func (h *Headers) check() error {
	if h == nil {
		return nil
	}
	if len(h.Hosts) == 0 || len(h.Hosts) > MaxHeaderHosts || len(h.Sealed) == 0 || len(h.Sealed) > MaxHeaderSealed {
		return fmt.Errorf("%w: egress policy: sealed headers of %d hosts and %d bytes (1 to %d hosts, at most %d bytes)",
			model.ErrInvalid, len(h.Hosts), len(h.Sealed), MaxHeaderHosts, MaxHeaderSealed)
	}
	return nil
}

func (h *Headers) clone() *Headers {
	if h == nil {
		return nil
	}
	c := &Headers{Sealed: slices.Clone(h.Sealed), Hosts: make([]HeaderHost, len(h.Hosts))}
	for i, hh := range h.Hosts {
		c.Hosts[i] = HeaderHost{Host: hh.Host, Names: slices.Clone(hh.Names)}
	}
	return c
}
