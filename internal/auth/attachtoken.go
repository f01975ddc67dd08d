package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Lifetime and clock tolerance of attachment tokens.
const (
	// AttachTokenTTL is how long an attachment token is valid after issue.
	AttachTokenTTL = 120 * time.Second
	// ClockSkew is how far the verifier's clock may be off the issuer's:
	// nbf, iat and exp are checked with this much leeway.
	ClockSkew = 15 * time.Second
	// maxTokenLen bounds what Verify parses at all.
	maxTokenLen = 4096
)

// JWT constants of attachment tokens. The issuer and audience keep a token
// from being mistaken for (or replayed as) any other JWT signed elsewhere.
const (
	tokenIssuer   = "airlock"
	tokenAudience = "airlock-attach"
	signingAlg    = "EdDSA"
)

// Errors of Verify and VerifyFile. Every refusal wraps exactly one of them: ErrTokenExpired
// for an authentic token past its expiry (API code token_expired), and
// ErrInvalidToken for everything else (unauthenticated).
var (
	ErrTokenExpired = errors.New("token expired")
	ErrInvalidToken = errors.New("invalid token")
)

// Action is one thing an attachment token allows on its process.
type Action string

// Actions.
const (
	ActionRead   Action = "read"   // stream the process's output (attach)
	ActionStdin  Action = "stdin"  // write to its stdin
	ActionSignal Action = "signal" // send it signals
	ActionResize Action = "resize" // resize its terminal
)

// AllActions are the actions of a new command session's token, in canonical order.
var allActions = [...]Action{ActionRead, ActionStdin, ActionSignal, ActionResize}

// AllActions returns every action, in canonical order.
func AllActions() []Action { return slices.Clone(allActions[:]) }

// ParseAction parses s as an action; unknown actions are refused.
func ParseAction(s string) (Action, error) {
	if slices.Contains(allActions[:], Action(s)) {
		return Action(s), nil
	}
	return "", fmt.Errorf("%w: action %q must be one of read, stdin, signal, resize", model.ErrInvalid, textclip.Bytes(s, maxEcho))
}

// ParseActions parses a non-empty list of distinct actions.
func ParseActions(ss []string) ([]Action, error) {
	if len(ss) == 0 {
		return nil, fmt.Errorf("%w: at least one action is needed", model.ErrInvalid)
	}
	out := make([]Action, 0, len(ss))
	for _, s := range ss {
		a, err := ParseAction(s)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, a) {
			return nil, fmt.Errorf("%w: action %q is listed twice", model.ErrInvalid, a)
		}
		out = append(out, a)
	}
	return out, nil
}

// AttachClaims is what an attachment token grants: the actions on one
// process of one command session, for a bounded time.
type AttachClaims struct {
	Session   model.CommandSessionID // sid
	Sandbox   model.SandboxID        // sbx
	Process   model.ProcessID        // pid
	Node      model.NodeID           // node: the node hosting the sandbox; empty if not placed
	Actions   []Action               // act
	IssuedAt  time.Time              // iat
	NotBefore time.Time              // nbf
	ExpiresAt time.Time              // exp
	KeyID     string                 // kid of the signing key (set by Verify; ignored by Issue)
	TokenID   string                 // jti: unique per token (set by Issue and Verify; ignored by Issue)
}

// Allows reports whether the claims grant action.
func (c AttachClaims) Allows(action Action) bool { return slices.Contains(c.Actions, action) }

// validate checks what Issue must never sign and Verify must never accept.
func (c AttachClaims) validate() error {
	if _, err := model.ParseCommandSessionID(c.Session.String()); err != nil {
		return fmt.Errorf("sid: %w", err)
	}
	if _, err := model.ParseSandboxID(c.Sandbox.String()); err != nil {
		return fmt.Errorf("sbx: %w", err)
	}
	if _, err := model.ParseProcessID(c.Process.String()); err != nil {
		return fmt.Errorf("pid: %w", err)
	}
	if c.Node != "" {
		if _, err := model.ParseNodeID(c.Node.String()); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	acts := make([]string, len(c.Actions))
	for i, a := range c.Actions {
		acts[i] = string(a)
	}
	if _, err := ParseActions(acts); err != nil {
		return fmt.Errorf("act: %w", err)
	}
	return checkLifetime(c.IssuedAt, c.NotBefore, c.ExpiresAt)
}

// wireClaims is the JWT payload.
type wireClaims struct {
	Session string   `json:"sid"`
	Sandbox string   `json:"sbx"`
	Process string   `json:"pid"`
	Node    string   `json:"node,omitempty"`
	Actions []string `json:"act"`
	jwt.RegisteredClaims
}

// Issuer signs attachment and file transfer tokens with the active private key.
type Issuer struct {
	active func() signingKey
}

// signingKey is one Ed25519 key pair and its ID.
type signingKey struct {
	id      string
	private ed25519.PrivateKey
	created time.Time
}

// NewIssuer returns an Issuer that signs with one fixed key (tests and
// tools; a server uses Keyring.Issuer, which follows rotation).
func NewIssuer(kid string, key ed25519.PrivateKey) (*Issuer, error) {
	if err := checkKeyID(kid); err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("auth: an Ed25519 private key is needed")
	}
	k := signingKey{id: kid, private: key}
	return &Issuer{active: func() signingKey { return k }}, nil
}

// Issue signs c. A zero NotBefore means IssuedAt; a zero ExpiresAt means
// IssuedAt + AttachTokenTTL. Times are truncated to whole seconds (JWT
// NumericDate). KeyID is set from the signing key.
func (i *Issuer) Issue(c AttachClaims) (string, error) {
	c.IssuedAt, c.NotBefore, c.ExpiresAt = lifetime(c.IssuedAt, c.NotBefore, c.ExpiresAt, AttachTokenTTL)
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("issue attachment token: %w", err)
	}
	acts := make([]string, len(c.Actions))
	for i, a := range c.Actions {
		acts[i] = string(a)
	}
	s, err := i.sign(wireClaims{
		Session:          c.Session.String(),
		Sandbox:          c.Sandbox.String(),
		Process:          c.Process.String(),
		Node:             c.Node.String(),
		Actions:          acts,
		RegisteredClaims: registered(tokenAudience, c.IssuedAt, c.NotBefore, c.ExpiresAt),
	})
	if err != nil {
		return "", fmt.Errorf("sign attachment token: %w", err)
	}
	return attachmentPrefix + s, nil
}

// PublicKey is a verification key. A zero NotAfter means no end; otherwise
// tokens signed with it are refused after NotAfter (the end of the overlap
// window after a rotation).
type PublicKey struct {
	ID       string
	Key      ed25519.PublicKey
	NotAfter time.Time
}

// Verifier checks attachment and file transfer tokens. It holds only public keys.
type Verifier struct {
	keys func() []PublicKey
	// published, if set, finds the keys other processes published (see
	// WithPublished) when keys does not hold a token's kid.
	published *publishedKeys
}

// NewVerifier returns a Verifier with a fixed set of public keys.
func NewVerifier(keys ...PublicKey) (*Verifier, error) {
	for _, k := range keys {
		if err := checkKeyID(k.ID); err != nil {
			return nil, err
		}
		if len(k.Key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("auth: key %s is not an Ed25519 public key", k.ID)
		}
	}
	keys = slices.Clone(keys)
	return &Verifier{keys: func() []PublicKey { return keys }}, nil
}

// Verify checks token at time now: the alt_ prefix, an EdDSA signature by a
// known key still in its validity window, issuer and audience, iat, nbf and
// exp (with ClockSkew of leeway), and well-formed typed claims. It returns
// an error wrapping ErrTokenExpired or ErrInvalidToken.
func (v *Verifier) Verify(token string, now time.Time) (AttachClaims, error) {
	if len(token) > maxTokenLen {
		return AttachClaims{}, fmt.Errorf("%w: too long", ErrInvalidToken)
	}
	raw, ok := strings.CutPrefix(token, attachmentPrefix)
	if !ok {
		return AttachClaims{}, fmt.Errorf("%w: an attachment token starts with %q", ErrInvalidToken, attachmentPrefix)
	}
	var wc wireClaims
	kid, err := v.parse(raw, tokenAudience, now, &wc)
	if err != nil {
		return AttachClaims{}, err
	}
	c, err := wc.parse(kid)
	if err != nil {
		return AttachClaims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return c, nil
}

// parse turns verified wire claims into typed claims, once.
func (wc wireClaims) parse(kid string) (AttachClaims, error) {
	var c AttachClaims
	var err error
	if c.Session, err = model.ParseCommandSessionID(wc.Session); err != nil {
		return c, fmt.Errorf("sid: %w", err)
	}
	if c.Sandbox, err = model.ParseSandboxID(wc.Sandbox); err != nil {
		return c, fmt.Errorf("sbx: %w", err)
	}
	if c.Process, err = model.ParseProcessID(wc.Process); err != nil {
		return c, fmt.Errorf("pid: %w", err)
	}
	if wc.Node != "" {
		if c.Node, err = model.ParseNodeID(wc.Node); err != nil {
			return c, fmt.Errorf("node: %w", err)
		}
	}
	if c.Actions, err = ParseActions(wc.Actions); err != nil {
		return c, fmt.Errorf("act: %w", err)
	}
	if wc.IssuedAt == nil || wc.NotBefore == nil || wc.ExpiresAt == nil {
		return c, errors.New("iat, nbf and exp are required")
	}
	c.IssuedAt, c.NotBefore, c.ExpiresAt = wc.IssuedAt.Time, wc.NotBefore.Time, wc.ExpiresAt.Time
	c.KeyID, c.TokenID = kid, wc.ID
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, nil
}

// maxEcho is how many bytes of a token's value an error message quotes (textclip.Bytes).
const maxEcho = 64
