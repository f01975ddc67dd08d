// Package auth makes and checks Airlock's kinds of bearer token, which are
// never interchangeable:
//
//   - API keys (management plane): "alk_<key id>_<secret>", where <key id> is
//     the 26-character random part of a model.APIKeyID, so the key can be
//     looked up, and <secret> is 256 random bits. Only SHA-256(secret) is stored.
//     The same key may instead be spelled in the E2B form (FormatE2B), which
//     E2B SDKs accept: "e2b_" + 96 lower-case hex digits, the hex of the 16
//     bytes the key ID's random part encodes followed by the hex of the
//     32-byte secret. Both forms parse to the same (key ID, secret); which
//     one a key is shown in is chosen once, when it is created.
//   - Attachment tokens (data plane): "alt_<JWT>", a capability for one
//     process of one command session: a compact JWT signed with Ed25519
//     (EdDSA) naming the session, sandbox, process and node and the allowed
//     actions (read, stdin, signal, resize), valid AttachTokenTTL (120 s) and
//     checked with ClockSkew (15 s) of leeway. The API signs them with an
//     Issuer (private key, from a rotatable Keyring); the data plane checks
//     them with a Verifier (public keys only) and never asks the store.
//     See attachtoken.go and keyring.go.
//   - File transfer tokens (data plane): "alf_<JWT>", a capability for one
//     byte stream (download, upload, tar-out, tar-in, watch) of one path in
//     one sandbox, signed and checked exactly like attachment tokens with the
//     same keys but another audience, so neither passes as the other. See
//     filetoken.go.
//   - Sandbox access tokens (management plane, one sandbox): "als_<JWT>",
//     naming one sandbox and its project, with no expiry; see sandboxtoken.go.
//
// API key secrets are encoded in lower-case RFC 4648 base32 without padding,
// the same alphabet as Airlock's IDs, so a key never contains '_' after its
// prefix parts and splits unambiguously.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// ErrMalformed is wrapped by every token parse error.
var ErrMalformed = errors.New("malformed token")

// TokenKind says which plane a bearer token belongs to.
type TokenKind int

// Token kinds.
const (
	KindUnknown    TokenKind = iota // neither prefix
	KindAPIKey                      // "alk_…" or "e2b_…": management API key
	KindAttachment                  // "alt_…": data-plane attachment token
	KindFiles                       // "alf_…": data-plane file transfer token (see FilesTokenPrefix)
	KindSandbox                     // "als_…": sandbox access token (see SandboxTokenPrefix)
	KindVolume                      // "alv_…": volume content token (see VolumeTokenPrefix)
)

func (k TokenKind) String() string {
	switch k {
	case KindAPIKey:
		return "api key"
	case KindAttachment:
		return "attachment token"
	case KindFiles:
		return "file transfer token"
	case KindSandbox:
		return "sandbox access token"
	case KindVolume:
		return "volume content token"
	}
	return "unknown"
}

const (
	apiKeyPrefix     = "alk_"
	e2bKeyPrefix     = "e2b_"
	attachmentPrefix = "alt_"
	secretBytes      = 32 // 256 bits
	idRandomLen      = 26 // length of the random part of a model ID
)

// secretEncoding is lower-case base32 without padding: 32 bytes → 52 characters.
var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

var secretEncodedLen = secretEncoding.EncodedLen(secretBytes)

// KindOf tells by its prefix which kind of token s is. It does not check the
// rest of the token: a plane uses it to refuse the other plane's tokens with
// a precise error before parsing its own.
func KindOf(s string) TokenKind {
	switch {
	case strings.HasPrefix(s, apiKeyPrefix), strings.HasPrefix(s, e2bKeyPrefix):
		return KindAPIKey
	case strings.HasPrefix(s, attachmentPrefix):
		return KindAttachment
	case strings.HasPrefix(s, FilesTokenPrefix):
		return KindFiles
	case strings.HasPrefix(s, SandboxTokenPrefix):
		return KindSandbox
	case strings.HasPrefix(s, VolumeTokenPrefix):
		return KindVolume
	}
	return KindUnknown
}

// HashSecret returns SHA-256(secret), the only form in which a token's secret
// is stored.
func HashSecret(secret []byte) []byte {
	sum := sha256.Sum256(secret)
	return sum[:]
}

// VerifySecret reports whether secret hashes to hash, comparing in constant time.
func VerifySecret(hash, secret []byte) bool {
	sum := sha256.Sum256(secret)
	return len(hash) == sha256.Size && subtle.ConstantTimeCompare(hash, sum[:]) == 1
}

// APIKeyFormat is how an API key token is spelled.
type APIKeyFormat string

// API key formats.
const (
	FormatAirlock APIKeyFormat = "airlock" // "alk_<key id>_<secret>"
	FormatE2B     APIKeyFormat = "e2b"     // "e2b_<hex>", which E2B SDKs accept
)

// ParseAPIKeyFormat parses s as a key format; "" means FormatAirlock.
func ParseAPIKeyFormat(s string) (APIKeyFormat, error) {
	switch f := APIKeyFormat(s); f {
	case "":
		return FormatAirlock, nil
	case FormatAirlock, FormatE2B:
		return f, nil
	}
	return "", fmt.Errorf("%w: key format %q must be airlock or e2b", model.ErrInvalid, textclip.Bytes(s, maxEcho))
}

// GenerateAPIKey returns a new API key token in FormatAirlock, the key's
// ID and the SHA-256 of its secret. The token is shown to its owner once
// and never stored.
func GenerateAPIKey() (token string, id model.APIKeyID, secretHash []byte) {
	token, id, secretHash, _ = GenerateAPIKeyFormat(FormatAirlock)
	return token, id, secretHash
}

// GenerateAPIKeyFormat is GenerateAPIKey with the token spelled in format f.
// Both formats store the same thing: the key ID and SHA-256 of the secret.
func GenerateAPIKeyFormat(f APIKeyFormat) (token string, id model.APIKeyID, secretHash []byte, err error) {
	id = model.NewAPIKeyID()
	secret := newSecret()
	switch f {
	case FormatAirlock:
		token = apiKeyPrefix + strings.TrimPrefix(id.String(), "key_") + "_" + secretEncoding.EncodeToString(secret)
	case FormatE2B:
		raw, derr := secretEncoding.DecodeString(strings.TrimPrefix(id.String(), "key_"))
		if derr != nil || len(raw) != e2bIDBytes {
			// model.NewAPIKeyID always encodes 16 bytes.
			return "", "", nil, fmt.Errorf("auth: key ID %s does not encode %d bytes", id, e2bIDBytes)
		}
		token = e2bKeyPrefix + hex.EncodeToString(raw) + hex.EncodeToString(secret)
	default:
		return "", "", nil, fmt.Errorf("%w: unknown key format %q", model.ErrInvalid, textclip.Bytes(string(f), maxEcho))
	}
	return token, id, HashSecret(secret), nil
}

// e2bIDBytes is how many bytes the random part of a model ID encodes.
const e2bIDBytes = 16

// e2bKeyHexLen is the length of an E2B-form key after its prefix.
const e2bKeyHexLen = 2 * (e2bIDBytes + secretBytes)

// ParseAPIKey splits an API key token, in either format, into its key ID
// and raw secret. Each key has exactly one spelling in each format.
func ParseAPIKey(token string) (model.APIKeyID, []byte, error) {
	if rest, ok := strings.CutPrefix(token, e2bKeyPrefix); ok {
		return parseE2BKey(rest)
	}
	rest, ok := strings.CutPrefix(token, apiKeyPrefix)
	if !ok {
		return "", nil, fmt.Errorf("%w: an API key starts with %q or %q", ErrMalformed, apiKeyPrefix, e2bKeyPrefix)
	}
	idPart, secretPart, ok := strings.Cut(rest, "_")
	if !ok || len(idPart) != idRandomLen {
		return "", nil, fmt.Errorf("%w: an API key is %s<key id>_<secret>", ErrMalformed, apiKeyPrefix)
	}
	id, err := model.ParseAPIKeyID("key_" + idPart)
	if err != nil {
		return "", nil, fmt.Errorf("%w: bad key id: %w", ErrMalformed, err)
	}
	secret, err := decodeSecret(secretPart)
	if err != nil {
		return "", nil, err
	}
	return id, secret, nil
}

// parseE2BKey parses what follows "e2b_": exactly e2bKeyHexLen lower-case
// hex digits (the only spelling hex.EncodeToString makes).
func parseE2BKey(s string) (model.APIKeyID, []byte, error) {
	if len(s) != e2bKeyHexLen {
		return "", nil, fmt.Errorf("%w: an E2B-form API key is %s and %d lower-case hex digits", ErrMalformed, e2bKeyPrefix, e2bKeyHexLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", nil, fmt.Errorf("%w: an E2B-form API key holds only lower-case hex digits", ErrMalformed)
		}
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	id, err := model.ParseAPIKeyID("key_" + secretEncoding.EncodeToString(b[:e2bIDBytes]))
	if err != nil {
		return "", nil, fmt.Errorf("%w: bad key id: %w", ErrMalformed, err)
	}
	return id, b[e2bIDBytes:], nil
}

// decodeSecret accepts only the canonical encoding of exactly secretBytes
// bytes, so every secret has one spelling.
func decodeSecret(s string) ([]byte, error) {
	if len(s) != secretEncodedLen {
		return nil, fmt.Errorf("%w: the secret must be %d characters", ErrMalformed, secretEncodedLen)
	}
	b, err := secretEncoding.DecodeString(s)
	if err != nil || len(b) != secretBytes || secretEncoding.EncodeToString(b) != s {
		return nil, fmt.Errorf("%w: the secret is not canonical lower-case base32", ErrMalformed)
	}
	return b, nil
}

func newSecret() []byte {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand never fails on Linux ≥ 3.17; a failure is unrecoverable.
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return b
}
