package dataplane

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// FileTokenTTL is how long a file transfer token is valid.
const FileTokenTTL = 120 * time.Second

// FileClaims is what a file transfer token authorizes: one direction
// (apiv1.Direction…) on one path of one sandbox, until Expiry.
type FileClaims struct {
	Sandbox   model.SandboxID
	Path      model.GuestPath
	Direction string
	Expiry    time.Time
}

// Errors of FileTokens.Verify.
var (
	ErrTokenInvalid = errors.New("invalid file transfer token")
	ErrTokenExpired = errors.New("file transfer token expired")
)

// FileTokens issues and checks file transfer tokens ("alf_…"). The
// management API issues them; the data plane verifies them. The in-memory
// HMAC implementation below stands in until signed (Ed25519) data-plane
// tokens exist; any implementation must keep the "alf_" prefix or teach
// auth.KindOf its own.
type FileTokens interface {
	Issue(c FileClaims) (string, error)
	// Verify returns the claims of a token that is authentic and not
	// expired at now; otherwise an error wrapping ErrTokenInvalid or
	// ErrTokenExpired.
	Verify(token string, now time.Time) (FileClaims, error)
}

// HMACFileTokens signs claims with HMAC-SHA256 under a random key that
// lives only in this process: tokens die with it, and only this process
// (API and data plane in one server) can check them.
type HMACFileTokens struct {
	key [32]byte
}

// NewHMACFileTokens returns FileTokens with a fresh random key.
func NewHMACFileTokens() *HMACFileTokens {
	t := &HMACFileTokens{}
	_, _ = rand.Read(t.key[:]) // crypto/rand never fails on Linux ≥ 3.17
	return t
}

// fileTokenBody is the signed JSON payload.
type fileTokenBody struct {
	Sandbox   string `json:"s"`
	Path      string `json:"p"`
	Direction string `json:"d"`
	Expiry    int64  `json:"e"` // Unix seconds
}

var b64 = base64.RawURLEncoding

func (t *HMACFileTokens) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key[:])
	m.Write([]byte(auth.FilesTokenPrefix + payload))
	return m.Sum(nil)
}

// Issue makes a token: "alf_" base64url(payload) "." base64url(HMAC).
func (t *HMACFileTokens) Issue(c FileClaims) (string, error) {
	b, err := json.Marshal(fileTokenBody{Sandbox: c.Sandbox.String(), Path: c.Path.String(), Direction: c.Direction, Expiry: c.Expiry.Unix()})
	if err != nil {
		return "", fmt.Errorf("encode file token: %w", err)
	}
	payload := b64.EncodeToString(b)
	return auth.FilesTokenPrefix + payload + "." + b64.EncodeToString(t.mac(payload)), nil
}

// Verify checks the MAC first, then parses the claims and the expiry.
func (t *HMACFileTokens) Verify(token string, now time.Time) (FileClaims, error) {
	rest, ok := strings.CutPrefix(token, auth.FilesTokenPrefix)
	if !ok || len(rest) > 16<<10 {
		return FileClaims{}, ErrTokenInvalid
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return FileClaims{}, ErrTokenInvalid
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, t.mac(payload)) {
		return FileClaims{}, ErrTokenInvalid
	}
	raw, err := b64.DecodeString(payload)
	if err != nil {
		return FileClaims{}, ErrTokenInvalid
	}
	var body fileTokenBody
	if err := json.Unmarshal(raw, &body); err != nil {
		return FileClaims{}, fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	id, err := model.ParseSandboxID(body.Sandbox)
	if err != nil {
		return FileClaims{}, fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	p, err := model.ParseGuestPath(body.Path)
	if err != nil {
		return FileClaims{}, fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	c := FileClaims{Sandbox: id, Path: p, Direction: body.Direction, Expiry: time.Unix(body.Expiry, 0).UTC()}
	if !now.Before(c.Expiry) {
		return c, ErrTokenExpired
	}
	return c, nil
}
