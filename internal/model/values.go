package model

import (
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/textclip"
)

// TemplateDigest is the content address of a template: "sha256:" + 64 lower-case
// hex characters of the SHA-256 of its canonical manifest.
type TemplateDigest string

// ParseTemplateDigest parses s as a template digest.
func ParseTemplateDigest(s string) (TemplateDigest, error) {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", fmt.Errorf("%w: template digest %q must be sha256:<64 hex characters>", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	if strings.ToLower(hexPart) != hexPart {
		return "", fmt.Errorf("%w: template digest %q must be lower-case hex", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", fmt.Errorf("%w: template digest %q is not hex", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	return TemplateDigest(s), nil
}

// DigestFromSHA256 builds a digest from raw SHA-256 bytes.
func DigestFromSHA256(sum [32]byte) TemplateDigest {
	return TemplateDigest("sha256:" + hex.EncodeToString(sum[:]))
}

func (d TemplateDigest) String() string { return string(d) }

// Hex returns the 64 hex characters without the algorithm prefix.
func (d TemplateDigest) Hex() string { return strings.TrimPrefix(string(d), "sha256:") }

// TemplateName is a human alias for a template digest, such as "default" or
// "python-3.12". Names are 1–63 characters of [a-z0-9._-], starting with a
// letter or digit.
type TemplateName string

// ParseTemplateName parses s as a template name.
func ParseTemplateName(s string) (TemplateName, error) {
	if len(s) == 0 || len(s) > 63 {
		return "", fmt.Errorf("%w: template name %q must be 1 to 63 characters", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return "", fmt.Errorf("%w: template name %q must start with a lower-case letter or digit", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return "", fmt.Errorf("%w: template name %q may contain only a-z, 0-9, '.', '_' and '-'", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return TemplateName(s), nil
}

func (n TemplateName) String() string { return string(n) }

// DefaultTemplateName is the repository of the template that `airlock
// server` provides out of the box; see DefaultTemplate.
const DefaultTemplateName TemplateName = "default"

// TemplateRef names a template either by digest or by tagged name. Exactly
// one of the two is set.
type TemplateRef struct {
	digest TemplateDigest
	name   TaggedName
}

// ParseTemplateRef parses "sha256:<hex>" as a digest reference and anything
// else as a tagged name, "name" or "name:tag" (the tag defaults to "latest").
func ParseTemplateRef(s string) (TemplateRef, error) {
	if strings.HasPrefix(s, "sha256:") {
		d, err := ParseTemplateDigest(s)
		if err != nil {
			return TemplateRef{}, err
		}
		return TemplateRef{digest: d}, nil
	}
	if alg, _, ok := strings.Cut(s, ":"); ok && (alg == "sha384" || alg == "sha512") {
		return TemplateRef{}, fmt.Errorf("%w: template digest %q must be sha256:<64 hex characters>", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	n, err := ParseTaggedName(s)
	if err != nil {
		return TemplateRef{}, err
	}
	return TemplateRef{name: n}, nil
}

// RefByDigest returns a reference to the given digest.
func RefByDigest(d TemplateDigest) TemplateRef { return TemplateRef{digest: d} }

// RefByName returns a reference to the given tagged name.
func RefByName(n TaggedName) TemplateRef { return TemplateRef{name: n} }

// Digest returns the digest and true if the reference is by digest.
func (r TemplateRef) Digest() (TemplateDigest, bool) { return r.digest, r.digest != "" }

// Name returns the tagged name and true if the reference is by name.
func (r TemplateRef) Name() (TaggedName, bool) { return r.name, r.name.Name != "" }

// IsZero reports whether r is the zero reference.
func (r TemplateRef) IsZero() bool { return r.digest == "" && r.name.Name == "" }

// String is the digest or "name:tag".
func (r TemplateRef) String() string {
	if r.digest != "" {
		return string(r.digest)
	}
	if r.name.Name == "" {
		return ""
	}
	return r.name.String()
}

// IdempotencyKey is the client-chosen key of the Idempotency-Key header:
// 1–255 printable ASCII characters.
type IdempotencyKey string

// ParseIdempotencyKey parses s as an idempotency key.
func ParseIdempotencyKey(s string) (IdempotencyKey, error) {
	if len(s) == 0 || len(s) > 255 {
		return "", fmt.Errorf("%w: Idempotency-Key must be 1 to 255 characters", ErrInvalid)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "", fmt.Errorf("%w: Idempotency-Key may contain only printable ASCII without spaces", ErrInvalid)
		}
	}
	return IdempotencyKey(s), nil
}

func (k IdempotencyKey) String() string { return string(k) }

// GuestPath is an absolute, clean path inside a sandbox.
type GuestPath string

// ParseGuestPath parses s as an absolute path inside the guest. It must be
// absolute, already clean (no "..", "." or repeated slashes), valid UTF-8,
// without NUL bytes, at most 4096 bytes, and no component longer than 255
// bytes (the Linux limits PATH_MAX and NAME_MAX).
func ParseGuestPath(s string) (GuestPath, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("%w: path must not be empty", ErrInvalid)
	case len(s) > 4096:
		return "", fmt.Errorf("%w: path is longer than 4096 bytes", ErrInvalid)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return "", fmt.Errorf("%w: path %q must be valid UTF-8 without NUL", ErrInvalid, textclip.Bytes(s, maxEcho))
	case !strings.HasPrefix(s, "/"):
		return "", fmt.Errorf("%w: path %q must be absolute", ErrInvalid, textclip.Bytes(s, maxEcho))
	case path.Clean(s) != s:
		return "", fmt.Errorf("%w: path %q must be clean (no '..', '.', trailing or repeated '/')", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for c := range strings.SplitSeq(s[1:], "/") {
		if len(c) > 255 {
			return "", fmt.Errorf("%w: path %q has a component longer than 255 bytes", ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return GuestPath(s), nil
}

func (p GuestPath) String() string { return string(p) }

// Env is a set of environment variables for a sandbox or process. Names follow
// POSIX ([A-Za-z_][A-Za-z0-9_]*); values are valid UTF-8 without NUL.
type Env map[string]string

const (
	maxEnvVars     = 256
	maxEnvValueLen = 32 * 1024
)

// ParseEnv validates a raw map and returns it as Env. A nil map gives an empty Env.
func ParseEnv(raw map[string]string) (Env, error) {
	if len(raw) > maxEnvVars {
		return nil, fmt.Errorf("%w: at most %d environment variables", ErrInvalid, maxEnvVars)
	}
	env := make(Env, len(raw))
	for k, v := range raw {
		if !validEnvName(k) {
			return nil, fmt.Errorf("%w: environment variable name %q must match [A-Za-z_][A-Za-z0-9_]*", ErrInvalid, textclip.Bytes(k, maxEcho))
		}
		if len(v) > maxEnvValueLen || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: environment variable %s must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, k, maxEnvValueLen)
		}
		env[k] = v
	}
	return env, nil
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// List returns the variables as sorted "NAME=value" strings.
func (e Env) List() []string {
	out := make([]string, 0, len(e))
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Merge returns a new Env with the variables of over replacing those of e.
func (e Env) Merge(over Env) Env {
	out := make(Env, len(e)+len(over))
	for k, v := range e {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// DefaultPath is the PATH a process gets when its environment sets none
// (the agent's processes, a recipe's run steps).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SetEnv returns env, a list of NAME=VALUE entries, with the entries of set
// added: an entry replaces the one of the same name in place, new names are
// appended in order. A name env or set holds twice is kept once, at its first
// place, with its last value. Unlike Env, the list keeps its order (an
// image's or a template's config).
func SetEnv(env, set []string) []string {
	out := make([]string, 0, len(env)+len(set))
	index := make(map[string]int, len(env)+len(set))
	for _, list := range [][]string{env, set} {
		for _, kv := range list {
			name, _, _ := strings.Cut(kv, "=")
			if i, ok := index[name]; ok {
				out[i] = kv
				continue
			}
			index[name] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// Metadata is a set of user labels on a sandbox, used for filtering
// (keys under the reserved prefixes, ReservedMetadataKey, are the
// server's own).
// At most 32 entries; keys are 1–63 characters of [A-Za-z0-9._/-]; values are
// at most 256 bytes of UTF-8.
type Metadata map[string]string

const (
	maxMetadataEntries  = 32
	maxMetadataKeyLen   = 63
	maxMetadataValueLen = 256
)

// ParseMetadata validates a raw map and returns it as Metadata.
func ParseMetadata(raw map[string]string) (Metadata, error) {
	if len(raw) > maxMetadataEntries {
		return nil, fmt.Errorf("%w: at most %d metadata entries", ErrInvalid, maxMetadataEntries)
	}
	md := make(Metadata, len(raw))
	for k, v := range raw {
		if err := validMetadataKey(k); err != nil {
			return nil, err
		}
		if len(v) > maxMetadataValueLen || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: metadata value of %q must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, k, maxMetadataValueLen)
		}
		md[k] = v
	}
	return md, nil
}

// reservedMetadataPrefixes start the metadata keys the server keeps for
// itself: "e2b.airlock/" (the E2B API's, e.g. e2b.airlock/template-id,
// the templateID an E2B client named) and "airlock/" (kept for Airlock).
var reservedMetadataPrefixes = []string{"e2b.airlock/", "airlock/"}

// BuildSandboxMetadata is the reserved metadata key of a template build's
// sandbox (its value: the build's ID); only the server sets it.
const BuildSandboxMetadata = "airlock/build"

// ReservedMetadataKey reports whether k is a key the server keeps for
// itself (one of the reserved prefixes, case aside): no client sets it;
// only the server's own E2B translation does, in-process.
func ReservedMetadataKey(k string) bool {
	for _, p := range reservedMetadataPrefixes {
		if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
			return true
		}
	}
	return false
}

// ParseMetadataFilter parses "key=value" as a single metadata filter term.
func ParseMetadataFilter(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%w: metadata filter %q must be key=value", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	if err := validMetadataKey(k); err != nil {
		return "", "", err
	}
	if len(v) > maxMetadataValueLen || !utf8.ValidString(v) {
		return "", "", fmt.Errorf("%w: metadata filter value too long or not UTF-8", ErrInvalid)
	}
	return k, v, nil
}

func validMetadataKey(k string) error {
	if k == "" || len(k) > maxMetadataKeyLen {
		return fmt.Errorf("%w: metadata key %q must be 1 to %d characters", ErrInvalid, textclip.Bytes(k, maxEcho), maxMetadataKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/' {
			continue
		}
		return fmt.Errorf("%w: metadata key %q may contain only A-Z, a-z, 0-9, '.', '_', '-' and '/'", ErrInvalid, textclip.Bytes(k, maxEcho))
	}
	return nil
}

// Signal is a Linux signal number (1–64) named by a client.
type Signal int

// ParseSignal parses a signal name ("TERM", "SIGTERM", "term") or number
// ("15").
func ParseSignal(s string) (Signal, error) {
	t := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if n, err := strconv.Atoi(t); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("%w: signal %d: want 1–64", ErrInvalid, n)
		}
		return Signal(n), nil
	}
	names := signalNames()
	for n, name := range names {
		if name != "" && name == t {
			return Signal(n), nil
		}
	}
	switch t {
	case "IOT":
		return 6, nil
	case "POLL":
		return 29, nil
	}
	return 0, fmt.Errorf("%w: unknown signal %q (want a name such as TERM, KILL, INT, HUP or a number 1–64)", ErrInvalid, textclip.Bytes(s, 32))
}

// signalNames returns Linux's signal names by number (x86, arm and most
// others).
func signalNames() [32]string {
	return [32]string{1: "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1",
		"SEGV", "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
		"URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"}
}

// AgentName is the signal as the guest agent's protocol names it: the
// names protocol 1 knows, the number otherwise (protocol 2 takes numbers).
func (s Signal) AgentName() string {
	switch n := s.String(); n {
	case "TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT":
		return n
	}
	return strconv.Itoa(int(s))
}

// String returns the signal's name ("TERM") or "SIG<n>".
func (s Signal) String() string {
	if names := signalNames(); int(s) > 0 && int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "SIG" + strconv.Itoa(int(s))
}

// GuestPort is a TCP port inside a sandbox, 1–65535.
type GuestPort uint16

// ParseGuestPort parses a port in canonical decimal: no sign, no leading
// zero, 1–65535.
func ParseGuestPort(s string) (GuestPort, error) {
	bad := func() (GuestPort, error) {
		return 0, fmt.Errorf("%w: port %q is not a TCP port (1-65535, decimal)", ErrInvalid, textclip.Bytes(s, 16))
	}
	if s == "" || len(s) > 5 || s[0] == '0' {
		return bad()
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return bad()
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return bad()
	}
	return GuestPort(n), nil
}

func (p GuestPort) String() string { return strconv.FormatUint(uint64(p), 10) }
