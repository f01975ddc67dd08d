package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// File operations a signed /files URL can be for.
const (
	opRead  = "read"
	opWrite = "write"
)

// signaturePrefix is the version tag of E2B's file URL signatures.
const signaturePrefix = "v1_"

// fileSignature is E2B's signature of a file URL: "v1_" + unpadded
// standard base64 of SHA-256 over "path:operation:username:token", with
// ":expiration" appended when the URL expires.
func fileSignature(path, operation, username, token string, expiration string) string {
	msg := path + ":" + operation + ":" + username + ":" + token
	if expiration != "" {
		msg += ":" + expiration
	}
	sum := sha256.Sum256([]byte(msg))
	return signaturePrefix + base64.RawStdEncoding.EncodeToString(sum[:])
}

var errBadSignature = errors.New("invalid file URL signature")

// errSignatureExpired is a signature made with the sandbox's token whose
// expiration has passed; its text is E2B's envd's answer to it (401).
var errSignatureExpired = fmt.Errorf("%w: signature is already expired", errBadSignature)

// expiredMessage is the message E2B's envd answers an expired signature with.
const expiredMessage = "signature is already expired"

// checkFileSignature checks a signed /files URL's signature against the
// sandbox's access token: the signature must match and, when the URL
// carries an expiration (unix seconds), it must not have passed
// (errSignatureExpired, only for a signature that matches: it tells
// nothing to a caller who could not sign).
func checkFileSignature(sig, expiration, path, operation, username, token string, now time.Time) error {
	if !signatureMatches(sig, expiration, path, operation, username, token) {
		return errBadSignature
	}
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil || exp < 0 {
			return fmt.Errorf("%w: signature_expiration %q is not unix seconds", errBadSignature, expiration)
		}
		if now.Unix() > exp {
			return errSignatureExpired
		}
	}
	return nil
}

// signatureMatches reports whether sig signs the URL with token.
func signatureMatches(sig, expiration, path, operation, username, token string) bool {
	want := fileSignature(path, operation, username, token, expiration)
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// wellFormedSignature reports whether sig has the shape of E2B's file
// URL signatures: "v1_" and 43 base64 characters.
func wellFormedSignature(sig string) bool {
	rest, ok := strings.CutPrefix(sig, signaturePrefix)
	if !ok || len(rest) != 43 {
		return false
	}
	_, err := base64.RawStdEncoding.DecodeString(rest)
	return err == nil
}
