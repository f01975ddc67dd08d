package resolver

import (
	"fmt"
	"math"
	"strings"
)

// NameLimits bound what a queried name may carry, so that a sandbox cannot move data out in
// bulk through the names it asks about (every name the policy allows is forwarded, and whoever
// runs the authoritative server of that zone sees it). A zero field takes its default; a
// negative one turns that check off.
//
// The defaults come from what real names look like. Names made by people and vendors have
// short labels of words; encoded data (hex, base32, base36: what DNS tunnels and exfiltration
// tools emit, since DNS ignores case) is long, close to uniform and rich in digits:
//
//   - MaxLabelLen 40 (DNS allows 63): the labels of common services (package registries,
//     cloud APIs, CDNs) stay under 40; tunnels (iodine, dnscat2) fill labels to 63.
//   - MaxNameLen 160 (DNS allows 253) and MaxLabels 12: room for long cloud names, but a
//     bound on the payload of a query that splits its data into many short labels.
//   - Entropy: a label's body (the label without '-' and '_', which separate words and are no
//     part of any encoding) of at least EntropyMinLen 16 bytes is refused when its Shannon
//     entropy exceeds MaxEntropy 4.0 bits per byte, or MaxDigitEntropy 3.3 when at least a
//     third of it is digits (hex is about 60% digits). Measured on 1000 random bodies each, at
//     16, 24, 32 and 40 bytes: hex is caught in 41%, 85%, 98%, 100% of cases; base32 in 6%,
//     47%, 90%, 99%; base36 in 26%, 76%, 97%, 100%. Word-made labels stay below:
//     "githubusercontent" 3.45, "generativelanguage" 3.09, "bedrock-runtime-fips",
//     "my-bucket-2023-backups" and "marketplace-visualstudio" pass. Machine-made labels with a
//     long hex ID in them (vpce-0a1b2c3d4e5f60718-…) do not: raise the limits, or turn the
//     entropy check off, where a sandbox needs such names. Shorter bodies are not judged:
//     entropy measured on a few bytes says nothing.
//
// The limits shrink, they do not close, the channel: a few bytes per query still leave through
// any zone the policy allows. A policy of "none" with named zones is what closes it (a zone the
// policy refuses is never forwarded); the limits make abusing the "public" default slow and
// loud (every refusal is a logged decision).
type NameLimits struct {
	MaxNameLen      int     // bytes of the name without its trailing dot; default 160
	MaxLabels       int     // labels in the name; default 12
	MaxLabelLen     int     // bytes of one label; default 40
	EntropyMinLen   int     // bodies at least this long have their entropy judged; default 16
	MaxEntropy      float64 // bits per byte allowed in such a body; default 4.0
	MaxDigitEntropy float64 // the same for a body that is at least a third digits; default 3.3
}

// Defaults of NameLimits.
const (
	DefaultMaxNameLen      = 160
	DefaultMaxLabels       = 12
	DefaultMaxLabelLen     = 40
	DefaultEntropyMinLen   = 16
	DefaultMaxEntropy      = 4.0
	DefaultMaxDigitEntropy = 3.3
)

func (l NameLimits) withDefaults() NameLimits {
	if l.MaxNameLen == 0 {
		l.MaxNameLen = DefaultMaxNameLen
	}
	if l.MaxLabels == 0 {
		l.MaxLabels = DefaultMaxLabels
	}
	if l.MaxLabelLen == 0 {
		l.MaxLabelLen = DefaultMaxLabelLen
	}
	if l.EntropyMinLen == 0 {
		l.EntropyMinLen = DefaultEntropyMinLen
	}
	if l.MaxEntropy == 0 {
		l.MaxEntropy = DefaultMaxEntropy
	}
	if l.MaxDigitEntropy == 0 {
		l.MaxDigitEntropy = DefaultMaxDigitEntropy
	}
	return l
}

// Check reports why name (normalized: lower case, no trailing dot) exceeds the limits, or nil.
// Zero fields are taken as their defaults.
func (l NameLimits) Check(name string) error {
	l = l.withDefaults()
	if l.MaxNameLen > 0 && len(name) > l.MaxNameLen {
		return fmt.Errorf("the name is %d bytes long, more than the limit of %d", len(name), l.MaxNameLen)
	}
	labels := strings.Split(name, ".")
	if l.MaxLabels > 0 && len(labels) > l.MaxLabels {
		return fmt.Errorf("the name has %d labels, more than the limit of %d", len(labels), l.MaxLabels)
	}
	for _, lb := range labels {
		if l.MaxLabelLen > 0 && len(lb) > l.MaxLabelLen {
			return fmt.Errorf("the label %q is %d bytes long, more than the limit of %d", lb, len(lb), l.MaxLabelLen)
		}
		if err := l.checkEntropy(lb); err != nil {
			return err
		}
	}
	return nil
}

func (l NameLimits) checkEntropy(label string) error {
	if l.EntropyMinLen <= 0 {
		return nil
	}
	body := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' {
			return -1
		}
		return r
	}, label)
	if len(body) < l.EntropyMinLen {
		return nil
	}
	digits := 0
	for i := 0; i < len(body); i++ {
		if body[i] >= '0' && body[i] <= '9' {
			digits++
		}
	}
	h := Entropy(body)
	if l.MaxEntropy > 0 && h > l.MaxEntropy {
		return fmt.Errorf("the label %q looks like encoded data: %.2f bits per byte, more than the limit of %.2f", label, h, l.MaxEntropy)
	}
	if l.MaxDigitEntropy > 0 && digits*3 >= len(body) && h > l.MaxDigitEntropy {
		return fmt.Errorf("the label %q looks like encoded data: %d of its %d bytes are digits and it has %.2f bits per byte, more than the limit of %.2f", label, digits, len(body), h, l.MaxDigitEntropy)
	}
	return nil
}

// Entropy is the Shannon entropy of s's byte distribution, in bits per byte (0 for "").
func Entropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}
