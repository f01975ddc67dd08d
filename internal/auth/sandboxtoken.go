package auth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

// SandboxTokenPrefix starts every sandbox access token: a management-API
// credential for one sandbox of one project (E2B's envdAccessToken). The
// API accepts it as a bearer token only on the routes under
// /v1/sandboxes/{id}/ (and /v1/sandboxes/{id} itself) whose {id} is that
// sandbox, and only while the sandbox exists in that project and is not
// deleted; the data plane refuses it with wrong_token_kind.
//
// It is signed like attachment tokens (Issuer.IssueSandbox, the keyring's
// active Ed25519 key) and checked with public keys only
// (Verifier.VerifySandbox), with its own audience, "airlock-sandbox", as
// its kind marker: no attachment, file transfer or forward token verifies
// as a sandbox token, nor the reverse.
//
// A sandbox token carries no time (no iat, nbf, exp, jti), so it is
// deterministic: Ed25519 signatures are, so the same claims signed with the
// same key give the same token, and a server can compute again the token a
// client holds (E2B signed file URLs are a SHA-256 over it). Its validity is
// therefore that of its signing key: it verifies while that key is the
// keyring's active key (rotated after the server's AttachKeyMaxAge, 30 days
// by default, checked hourly) and for the keyring's overlap window after
// the rotation (KeyringOptions.Overlap, at least MinKeyOverlap = 135 s);
// then it is refused as signed by a retired or unknown key. A token issued
// just before a rotation thus lives at least the overlap window, one issued
// just after about AttachKeyMaxAge. After a rotation IssueSandbox gives a
// new token for the same claims; the older one keeps verifying until its
// key retires. A token never outlives its sandbox: the API checks the
// sandbox in the store on every request.
const SandboxTokenPrefix = "als_"

const (
	// sandboxAudience keeps sandbox tokens apart from every other kind.
	sandboxAudience    = "airlock-sandbox"
	maxSandboxTokenLen = 2 << 10
)

// SandboxClaims is what a sandbox access token names: one sandbox and the
// project that owns it.
type SandboxClaims struct {
	Sandbox model.SandboxID // sbx
	Project model.ProjectID // prj
	KeyID   string          // kid of the signing key (set by VerifySandbox; ignored by IssueSandbox)
}

func (c SandboxClaims) validate() error {
	if _, err := model.ParseSandboxID(c.Sandbox.String()); err != nil {
		return fmt.Errorf("sbx: %w", err)
	}
	if _, err := model.ParseProjectID(c.Project.String()); err != nil {
		return fmt.Errorf("prj: %w", err)
	}
	return nil
}

// scopedWire is the JWT payload of a sandbox token (Sandbox set) and of
// a volume token (Volume set). It is its own type, not
// jwt.RegisteredClaims, so that its JSON has exactly these fields in this
// order (the token is deterministic) and no time.
type scopedWire struct {
	Issuer   string `json:"iss"`
	Audience string `json:"aud"`
	Sandbox  string `json:"sbx,omitempty"`
	Volume   string `json:"vol,omitempty"`
	Project  string `json:"prj"`
}

// The jwt.Claims interface: no times, one audience.
func (w scopedWire) GetExpirationTime() (*jwt.NumericDate, error) { return nil, nil }
func (w scopedWire) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (w scopedWire) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (w scopedWire) GetIssuer() (string, error)                   { return w.Issuer, nil }
func (w scopedWire) GetSubject() (string, error)                  { return "", nil }
func (w scopedWire) GetAudience() (jwt.ClaimStrings, error) {
	return jwt.ClaimStrings{w.Audience}, nil
}

// verifyScoped checks a scoped token of prefix and audience at now and
// returns its payload and the kid of its key.
func (v *Verifier) verifyScoped(token, prefix, audience string, now time.Time) (scopedWire, string, error) {
	if len(token) > maxSandboxTokenLen {
		return scopedWire{}, "", fmt.Errorf("%w: too long", ErrInvalidToken)
	}
	raw, ok := strings.CutPrefix(token, prefix)
	if !ok {
		return scopedWire{}, "", fmt.Errorf("%w: a %s token starts with %q", ErrInvalidToken, audience, prefix)
	}
	var kid string
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{signingAlg}),
		jwt.WithStrictDecoding(),
		jwt.WithIssuer(tokenIssuer),
		jwt.WithAudience(audience),
	)
	var w scopedWire
	if _, err := parser.ParseWithClaims(raw, &w, v.keyfunc(now, &kid)); err != nil {
		return scopedWire{}, "", fmt.Errorf("%w: %s token: %w", ErrInvalidToken, audience, err)
	}
	return w, kid, nil
}

// IssueSandbox signs c as a sandbox access token with the active key. The
// same claims and the same active key always give the same token.
func (i *Issuer) IssueSandbox(c SandboxClaims) (string, error) {
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("issue sandbox token: %w", err)
	}
	s, err := i.sign(scopedWire{Issuer: tokenIssuer, Audience: sandboxAudience, Sandbox: c.Sandbox.String(), Project: c.Project.String()})
	if err != nil {
		return "", fmt.Errorf("sign sandbox token: %w", err)
	}
	return SandboxTokenPrefix + s, nil
}

// SandboxTokens returns the sandbox token for c under each key of the ring
// that still verifies at now, the active key's first: every token for c a
// client of this ring may hold and the API still accepts. A server that
// checks a value derived from the token (E2B's signed file URLs) compares
// against each, so tokens issued before a rotation keep working for the
// overlap window. Tokens other rings (replicas) signed are not among them.
func (k *Keyring) SandboxTokens(c SandboxClaims, now time.Time) ([]string, error) {
	k.mu.RLock()
	keys := slices.Clone(k.keys)
	k.mu.RUnlock()
	var out []string
	for i := len(keys) - 1; i >= 0; i-- {
		if i < len(keys)-1 && now.After(keys[i+1].created.Add(k.overlap)) {
			break // retired, and so are the older ones
		}
		key := keys[i]
		tok, err := (&Issuer{active: func() signingKey { return key }}).IssueSandbox(c)
		if err != nil {
			return nil, err
		}
		out = append(out, tok)
	}
	return out, nil
}

// VerifySandbox is VerifySandboxAt at the current time.
func (v *Verifier) VerifySandbox(token string) (SandboxClaims, error) {
	return v.VerifySandboxAt(token, time.Now())
}

// VerifySandboxAt checks a sandbox access token at time now: the als_
// prefix, an EdDSA signature by a known key not retired at now, issuer and
// audience, and well-formed claims. It does not look at the sandbox: the
// caller checks that it still exists in the project. Every error wraps
// ErrInvalidToken (a sandbox token does not expire).
func (v *Verifier) VerifySandboxAt(token string, now time.Time) (SandboxClaims, error) {
	w, kid, err := v.verifyScoped(token, SandboxTokenPrefix, sandboxAudience, now)
	if err != nil {
		return SandboxClaims{}, err
	}
	var c SandboxClaims
	if c.Sandbox, err = model.ParseSandboxID(w.Sandbox); err != nil {
		return SandboxClaims{}, fmt.Errorf("%w: sbx: %w", ErrInvalidToken, err)
	}
	if c.Project, err = model.ParseProjectID(w.Project); err != nil {
		return SandboxClaims{}, fmt.Errorf("%w: prj: %w", ErrInvalidToken, err)
	}
	c.KeyID = kid
	return c, nil
}
