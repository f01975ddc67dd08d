package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// FilesTokenPrefix starts every file transfer token: a data-plane capability
// for one byte stream (download, upload, tar, watch) of one path in one
// sandbox. The API signs them (Issuer.IssueFile) with the same Ed25519 keys
// as attachment tokens; the data plane checks them (Verifier.VerifyFile)
// with public keys only; the management API refuses them with
// wrong_token_kind.
const FilesTokenPrefix = "alf_"

const (
	// FileTokenTTL is how long a file transfer token is valid after issue.
	FileTokenTTL = 120 * time.Second
	// filesAudience keeps file tokens and attachment tokens apart: each
	// verifier accepts only its own audience.
	filesAudience = "airlock-files"
	// maxFileTokenLen bounds what VerifyFile parses: a guest path alone may
	// be 4096 bytes.
	maxFileTokenLen = 16 << 10
)

// fileDirections are the transfer directions a file token may name.
var fileDirections = [...]string{apiv1.DirectionDownload, apiv1.DirectionUpload, apiv1.DirectionTarOut, apiv1.DirectionTarIn, apiv1.DirectionWatch}

// ParseFileDirection parses s as a transfer direction; unknown ones are refused.
func ParseFileDirection(s string) (string, error) {
	if slices.Contains(fileDirections[:], s) {
		return s, nil
	}
	return "", fmt.Errorf("%w: direction %q must be one of download, upload, tar-out, tar-in, watch", model.ErrInvalid, textclip.Bytes(s, maxEcho))
}

// FileClaims is what a file transfer token grants: one direction on one
// path of one sandbox, for a bounded time.
type FileClaims struct {
	Sandbox   model.SandboxID // sbx
	Path      model.GuestPath // path
	Direction string          // dir: one of the apiv1.Direction… constants
	User      *model.UserIDs  // user: the transfer runs as this guest user (nil: as the agent)
	IssuedAt  time.Time       // iat
	NotBefore time.Time       // nbf
	ExpiresAt time.Time       // exp
	KeyID     string          // kid of the signing key (set by VerifyFile; ignored by IssueFile)
	TokenID   string          // jti (set by VerifyFile; ignored by IssueFile)
}

// validate checks what IssueFile must never sign and VerifyFile must never accept.
func (c FileClaims) validate() error {
	if _, err := model.ParseSandboxID(c.Sandbox.String()); err != nil {
		return fmt.Errorf("sbx: %w", err)
	}
	if _, err := model.ParseGuestPath(c.Path.String()); err != nil {
		return fmt.Errorf("path: %w", err)
	}
	if _, err := ParseFileDirection(c.Direction); err != nil {
		return fmt.Errorf("dir: %w", err)
	}
	if c.User != nil {
		if _, err := model.ParseUserIDs(int64(c.User.UID), int64(c.User.GID)); err != nil {
			return fmt.Errorf("user: %w", err)
		}
	}
	return checkLifetime(c.IssuedAt, c.NotBefore, c.ExpiresAt)
}

// fileWireClaims is the JWT payload of a file token.
type fileWireClaims struct {
	Sandbox   string        `json:"sbx"`
	Path      string        `json:"path"`
	Direction string        `json:"dir"`
	User      *wireFileUser `json:"user,omitempty"`
	jwt.RegisteredClaims
}

// wireFileUser is the user claim of a file token.
type wireFileUser struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

// IssueFile signs c as a file transfer token. A zero NotBefore means
// IssuedAt; a zero ExpiresAt means IssuedAt + FileTokenTTL. Times are
// truncated to whole seconds.
func (i *Issuer) IssueFile(c FileClaims) (string, error) {
	c.IssuedAt, c.NotBefore, c.ExpiresAt = lifetime(c.IssuedAt, c.NotBefore, c.ExpiresAt, FileTokenTTL)
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("issue file transfer token: %w", err)
	}
	wc := fileWireClaims{
		Sandbox:          c.Sandbox.String(),
		Path:             c.Path.String(),
		Direction:        c.Direction,
		RegisteredClaims: registered(filesAudience, c.IssuedAt, c.NotBefore, c.ExpiresAt),
	}
	if c.User != nil {
		wc.User = &wireFileUser{UID: int64(c.User.UID), GID: int64(c.User.GID)}
	}
	s, err := i.sign(wc)
	if err != nil {
		return "", fmt.Errorf("sign file transfer token: %w", err)
	}
	return FilesTokenPrefix + s, nil
}

// VerifyFile checks a file transfer token at time now, as strictly as
// Verify checks attachment tokens but for the files audience, so neither
// kind passes as the other. It returns an error wrapping ErrTokenExpired or
// ErrInvalidToken.
func (v *Verifier) VerifyFile(token string, now time.Time) (FileClaims, error) {
	if len(token) > maxFileTokenLen {
		return FileClaims{}, fmt.Errorf("%w: too long", ErrInvalidToken)
	}
	raw, ok := strings.CutPrefix(token, FilesTokenPrefix)
	if !ok {
		return FileClaims{}, fmt.Errorf("%w: a file transfer token starts with %q", ErrInvalidToken, FilesTokenPrefix)
	}
	var wc fileWireClaims
	kid, err := v.parse(raw, filesAudience, now, &wc)
	if err != nil {
		return FileClaims{}, fmt.Errorf("file transfer token: %w", err)
	}
	c, err := wc.parse(kid)
	if err != nil {
		return FileClaims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return c, nil
}

// parse turns verified wire claims into typed claims, once.
func (wc fileWireClaims) parse(kid string) (FileClaims, error) {
	var c FileClaims
	var err error
	if c.Sandbox, err = model.ParseSandboxID(wc.Sandbox); err != nil {
		return c, fmt.Errorf("sbx: %w", err)
	}
	if c.Path, err = model.ParseGuestPath(wc.Path); err != nil {
		return c, fmt.Errorf("path: %w", err)
	}
	if c.Direction, err = ParseFileDirection(wc.Direction); err != nil {
		return c, fmt.Errorf("dir: %w", err)
	}
	if wc.User != nil {
		u, err := model.ParseUserIDs(wc.User.UID, wc.User.GID)
		if err != nil {
			return c, fmt.Errorf("user: %w", err)
		}
		c.User = &u
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
