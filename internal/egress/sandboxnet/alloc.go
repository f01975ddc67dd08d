package sandboxnet

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/airlockdev/airlock/internal/model"
)

// DefaultPrefix is the address pool used when the caller has no preference:
// a private /16 that Docker, libvirt, Kubernetes and common VPNs do not use
// by default. It holds 16384 sandboxes (one /30 each).
var DefaultPrefix = netip.MustParsePrefix("10.213.0.0/16")

// slotBits is the size of one sandbox's subnet: a /30 (network, host end,
// guest end, broadcast). A /31 would halve the space used but some guest
// tools still mishandle /31 point-to-point subnets.
const slotBits = 30

// IfPrefix starts the name of every host-side veth this package creates.
const IfPrefix = "alk"

// GuestIf is the name of the sandbox's interface inside its netns.
const GuestIf = "eth0"

// idHash is the digest every derived name and the preferred slot come from.
func idHash(id model.SandboxID) [32]byte { return sha256.Sum256([]byte(id)) }

// HostIfName is the host end's name: "alk" + 12 hex characters of the ID's
// SHA-256 (15 bytes, the kernel's IFNAMSIZ-1 limit).
func HostIfName(id model.SandboxID) string {
	h := idHash(id)
	return IfPrefix + hex.EncodeToString(h[:6])
}

// slotCount is how many /30s the pool holds.
func slotCount(p netip.Prefix) int { return 1 << (slotBits - p.Bits()) }

// preferredSlot is where allocation for id starts probing, so that the same
// ID gets the same addresses on every node where its slot is free.
func preferredSlot(id model.SandboxID, n int) int {
	h := idHash(id)
	return int(binary.BigEndian.Uint64(h[8:16]) % uint64(n))
}

// slotAddrs returns the host end (first usable address) and the guest end
// (second) of slot i, both with the /30 prefix length.
func slotAddrs(p netip.Prefix, i int) (host, guest netip.Prefix) {
	b := p.Masked().Addr().As4()
	base := binary.BigEndian.Uint32(b[:]) + uint32(i)<<(32-slotBits)
	var h, g [4]byte
	binary.BigEndian.PutUint32(h[:], base+1)
	binary.BigEndian.PutUint32(g[:], base+2)
	return netip.PrefixFrom(netip.AddrFrom4(h), slotBits), netip.PrefixFrom(netip.AddrFrom4(g), slotBits)
}

// The allocation file (<dir>/<id>.slot) records which slot a sandbox owns. It
// is written atomically before any kernel object exists, so every netns or
// veth this package made has one, and removed last on Detach.
const allocMagic = "airlock-sandboxnet v1 slot "

var errBadAlloc = errors.New("sandboxnet: malformed allocation file")

func formatAlloc(slot int) []byte { return []byte(allocMagic + strconv.Itoa(slot) + "\n") }

// parseAlloc parses an allocation file of a pool with n slots.
func parseAlloc(data []byte, n int) (int, error) {
	rest, ok := bytes.CutPrefix(data, []byte(allocMagic))
	if !ok {
		return 0, errBadAlloc
	}
	rest, ok = bytes.CutSuffix(rest, []byte("\n"))
	if !ok || len(rest) == 0 || len(rest) > 10 {
		return 0, errBadAlloc
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, errBadAlloc
		}
	}
	if len(rest) > 1 && rest[0] == '0' {
		return 0, errBadAlloc
	}
	v, err := strconv.Atoi(string(rest))
	if err != nil {
		return 0, errBadAlloc
	}
	if v >= n {
		return 0, fmt.Errorf("%w: slot %d outside the pool's %d", errBadAlloc, v, n)
	}
	return v, nil
}
