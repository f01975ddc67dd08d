package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

// ForwardTokenPrefix starts every forward token: the proof an API replica
// sends with a request it forwards to the node hosting the sandbox
// (header Airlock-Forward-Token). It is signed with the replica's
// attachment key and verified with the published public keys, and vouches
// for one request line, the two nodes, and the base URL the client reached
// the replica at (which the node then uses for attach and transfer URLs).
const ForwardTokenPrefix = "alp_"

const (
	// ForwardTokenTTL is how long a forward token is valid: one hop.
	ForwardTokenTTL = 30 * time.Second
	// forwardAudience keeps forward tokens apart from every other kind.
	forwardAudience = "airlock-forward"
	maxForwardLen   = 8 << 10
)

// ForwardClaims is what a forward token vouches for.
type ForwardClaims struct {
	From    model.NodeID // fwd: the forwarding replica
	To      model.NodeID // node: the node it forwards to
	Request string       // req: "METHOD request-URI" of the forwarded request
	// Base is the scheme://host[/prefix] the client reached the replica
	// at (base).
	Base      string
	IssuedAt  time.Time // iat
	ExpiresAt time.Time // exp
	KeyID     string    // set by VerifyForward
}

type forwardWire struct {
	From    string `json:"fwd"`
	To      string `json:"node"`
	Request string `json:"req"`
	Base    string `json:"base"`
	jwt.RegisteredClaims
}

func (c ForwardClaims) validate() error {
	if _, err := model.ParseNodeID(string(c.From)); err != nil {
		return fmt.Errorf("fwd: %w", err)
	}
	if _, err := model.ParseNodeID(string(c.To)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.Request == "" || c.Base == "" {
		return errors.New("req and base are required")
	}
	return checkLifetime(c.IssuedAt, c.IssuedAt, c.ExpiresAt)
}

// IssueForward signs c; a zero ExpiresAt means IssuedAt + ForwardTokenTTL.
func (i *Issuer) IssueForward(c ForwardClaims) (string, error) {
	c.IssuedAt, _, c.ExpiresAt = lifetime(c.IssuedAt, time.Time{}, c.ExpiresAt, ForwardTokenTTL)
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("issue forward token: %w", err)
	}
	s, err := i.sign(forwardWire{
		From: string(c.From), To: string(c.To), Request: c.Request, Base: c.Base,
		RegisteredClaims: registered(forwardAudience, c.IssuedAt, c.IssuedAt, c.ExpiresAt),
	})
	if err != nil {
		return "", fmt.Errorf("sign forward token: %w", err)
	}
	return ForwardTokenPrefix + s, nil
}

// VerifyForward checks a forward token at time now like Verify does an
// attachment token; the caller checks To, From and Request against the
// request it came with.
func (v *Verifier) VerifyForward(token string, now time.Time) (ForwardClaims, error) {
	if len(token) > maxForwardLen {
		return ForwardClaims{}, fmt.Errorf("%w: too long", ErrInvalidToken)
	}
	raw, ok := strings.CutPrefix(token, ForwardTokenPrefix)
	if !ok {
		return ForwardClaims{}, fmt.Errorf("%w: a forward token starts with %q", ErrInvalidToken, ForwardTokenPrefix)
	}
	var w forwardWire
	kid, err := v.parse(raw, forwardAudience, now, &w)
	if err != nil {
		return ForwardClaims{}, err
	}
	if w.IssuedAt == nil || w.ExpiresAt == nil {
		return ForwardClaims{}, fmt.Errorf("%w: iat and exp are required", ErrInvalidToken)
	}
	c := ForwardClaims{From: model.NodeID(w.From), To: model.NodeID(w.To), Request: w.Request, Base: w.Base,
		IssuedAt: w.IssuedAt.Time, ExpiresAt: w.ExpiresAt.Time, KeyID: kid}
	if err := c.validate(); err != nil {
		return ForwardClaims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return c, nil
}
