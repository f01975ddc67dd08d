package dataplane

import (
	"time"

	"github.com/airlockdev/airlock/internal/auth"
)

// FileTokenVerifier checks file transfer tokens: the data plane's side,
// with public keys only. *auth.Verifier implements it. VerifyFile returns
// the claims of an authentic, unexpired token, or an error wrapping
// auth.ErrTokenExpired or auth.ErrInvalidToken.
type FileTokenVerifier interface {
	VerifyFile(token string, now time.Time) (auth.FileClaims, error)
}
