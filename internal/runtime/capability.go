package runtime

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Capability is one optional thing a runtime instance can do.
type Capability string

// Capabilities a runtime may claim in Info().Capabilities.
const (
	// CapPause: freeze a sandbox's processes with memory resident and
	// continue them (Pauser).
	CapPause Capability = "pause"
	// CapCheckpoint: snapshot a sandbox's memory and runtime state and
	// restore it so its processes continue (runsc checkpoint/restore).
	CapCheckpoint Capability = "checkpoint"
	// CapFilesystemSnapshot: keep a sandbox's root filesystem changes
	// without its processes and create a sandbox from them again (with
	// CapCheckpoint too: on request, FilesystemSuspender).
	CapFilesystemSnapshot Capability = "filesystem-snapshot"
	// CapNetwork: put a sandbox into a prepared Spec.Network (without it,
	// a sandbox has loopback only and Spec.Network must be nil).
	CapNetwork Capability = "network"
	// CapLiveSnapshot: snapshot a running sandbox into a directory of its
	// own, leaving it running, and create new sandboxes from that snapshot
	// (Spec.From): forks (LiveSnapshotter). What a fork keeps is the
	// kind SnapshotKindOf says (memory: processes continue; filesystem:
	// the files only, processes start again).
	CapLiveSnapshot Capability = "live-snapshot"
)

// AllCapabilities lists every known capability, in the order
// Capabilities.List returns them.
var AllCapabilities = []Capability{CapPause, CapCheckpoint, CapFilesystemSnapshot, CapNetwork, CapLiveSnapshot}

func (c Capability) bit() (uint32, bool) {
	for i, k := range AllCapabilities {
		if k == c {
			return 1 << i, true
		}
	}
	return 0, false
}

// ParseCapability parses a capability's name.
func ParseCapability(s string) (Capability, error) {
	c := Capability(s)
	if _, ok := c.bit(); !ok {
		return "", fmt.Errorf("unknown runtime capability %q", s)
	}
	return c, nil
}

// Capabilities is a set of Capability values. The zero value is the empty
// set; values are comparable with ==.
type Capabilities struct{ bits uint32 }

// NewCapabilities returns the set of cs. It panics on a value that is not
// one of the Cap constants (a programming error).
func NewCapabilities(cs ...Capability) Capabilities {
	var s Capabilities
	for _, c := range cs {
		b, ok := c.bit()
		if !ok {
			panic(fmt.Sprintf("runtime: unknown capability %q", c))
		}
		s.bits |= b
	}
	return s
}

// Has reports whether c is in the set.
func (s Capabilities) Has(c Capability) bool {
	b, ok := c.bit()
	return ok && s.bits&b != 0
}

// With returns the set with cs added.
func (s Capabilities) With(cs ...Capability) Capabilities {
	return Capabilities{bits: s.bits | NewCapabilities(cs...).bits}
}

// Without returns the set with cs removed.
func (s Capabilities) Without(cs ...Capability) Capabilities {
	return Capabilities{bits: s.bits &^ NewCapabilities(cs...).bits}
}

// List returns the capabilities in the set, in AllCapabilities order.
func (s Capabilities) List() []Capability {
	out := []Capability{}
	for _, c := range AllCapabilities {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String lists the capabilities, comma-separated.
func (s Capabilities) String() string {
	names := make([]string, 0, len(AllCapabilities))
	for _, c := range s.List() {
		names = append(names, string(c))
	}
	return strings.Join(names, ",")
}

// MarshalJSON encodes the set as a JSON array of names.
func (s Capabilities) MarshalJSON() ([]byte, error) { return json.Marshal(s.List()) }

// UnmarshalJSON decodes a JSON array of names; an unknown name is an error.
func (s *Capabilities) UnmarshalJSON(data []byte) error {
	var names []string
	if err := json.Unmarshal(data, &names); err != nil {
		return fmt.Errorf("runtime capabilities: %w", err)
	}
	var out Capabilities
	for _, n := range names {
		c, err := ParseCapability(n)
		if err != nil {
			return err
		}
		out = out.With(c)
	}
	*s = out
	return nil
}
