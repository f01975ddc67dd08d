package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/textclip"
)

// registered returns the registered claims every Airlock token carries: a
// fresh jti, the issuer, one audience (which keeps the kinds of token apart)
// and the three times.
func registered(audience string, iat, nbf, exp time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{
		ID:        secretEncoding.EncodeToString(newSecret()[:16]),
		Issuer:    tokenIssuer,
		Audience:  jwt.ClaimStrings{audience},
		IssuedAt:  jwt.NewNumericDate(iat),
		NotBefore: jwt.NewNumericDate(nbf),
		ExpiresAt: jwt.NewNumericDate(exp),
	}
}

// sign signs claims as a compact EdDSA JWT with the active key, naming it
// in the kid header.
func (i *Issuer) sign(claims jwt.Claims) (string, error) {
	key := i.active()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = key.id
	return tok.SignedString(key.private)
}

// parse checks the compact JWT raw at time now and decodes its payload
// into claims: an EdDSA signature by a known key still in its validity
// window, issuer and audience, iat, nbf and exp (with ClockSkew of leeway).
// It returns the key's ID, or an error wrapping ErrTokenExpired or
// ErrInvalidToken.
func (v *Verifier) parse(raw, audience string, now time.Time, claims jwt.Claims) (string, error) {
	var kid string
	keyfunc := v.keyfunc(now, &kid)
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{signingAlg}),
		jwt.WithStrictDecoding(),
		jwt.WithLeeway(ClockSkew),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithIssuedAt(),
		jwt.WithExpirationRequired(),
		jwt.WithNotBeforeRequired(),
		jwt.WithIssuer(tokenIssuer),
		jwt.WithAudience(audience),
	)
	if _, err := parser.ParseWithClaims(raw, claims, keyfunc); err != nil {
		// The signature is checked before the claims, so an expired token
		// here is an authentic one.
		if errors.Is(err, jwt.ErrTokenExpired) {
			return "", fmt.Errorf("%w: %w", ErrTokenExpired, err)
		}
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return kid, nil
}

// keyfunc finds the public key named by a token's kid header (recording
// the kid in *kid): one of the verifier's own keys or a published one,
// refused once past its NotAfter at now.
func (v *Verifier) keyfunc(now time.Time, kid *string) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		*kid, _ = t.Header["kid"].(string)
		for _, k := range v.keys() {
			if k.ID == *kid && *kid != "" {
				if !k.NotAfter.IsZero() && now.After(k.NotAfter) {
					return nil, fmt.Errorf("key %q was retired", *kid)
				}
				return k.Key, nil
			}
		}
		if v.published != nil {
			if k, ok := v.published.get(*kid); ok {
				if !k.NotAfter.IsZero() && now.After(k.NotAfter) {
					return nil, fmt.Errorf("key %q was retired", *kid)
				}
				return k.Key, nil
			}
		}
		return nil, fmt.Errorf("unknown key %q", textclip.Bytes(*kid, maxEcho))
	}
}

// lifetime fills a token's times as Issue and IssueFile do: a zero nbf
// means iat, a zero exp means iat + ttl; all are truncated to seconds.
func lifetime(iat, nbf, exp time.Time, ttl time.Duration) (time.Time, time.Time, time.Time) {
	iat = iat.Truncate(time.Second)
	if nbf.IsZero() {
		nbf = iat
	}
	if exp.IsZero() {
		exp = iat.Add(ttl)
	}
	return iat, nbf.Truncate(time.Second), exp.Truncate(time.Second)
}

// checkLifetime refuses missing times and any order but iat <= nbf < exp.
func checkLifetime(iat, nbf, exp time.Time) error {
	if iat.IsZero() || nbf.IsZero() || exp.IsZero() {
		return errors.New("iat, nbf and exp are required")
	}
	if !exp.After(nbf) || nbf.Before(iat) {
		return errors.New("want iat <= nbf < exp")
	}
	return nil
}
