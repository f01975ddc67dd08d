package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
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

// checkFileSignature checks a signed /files URL's signature against the
// sandbox's access token: the signature must match and, when the URL
// carries an expiration (unix seconds), it must not have passed.
func checkFileSignature(sig, expiration, path, operation, username, token string, now time.Time) error {
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil || exp < 0 {
			return fmt.Errorf("%w: signature_expiration %q is not unix seconds", errBadSignature, expiration)
		}
		if now.Unix() > exp {
			return fmt.Errorf("%w: the URL expired at %s", errBadSignature, time.Unix(exp, 0).UTC().Format(time.RFC3339))
		}
	}
	want := fileSignature(path, operation, username, token, expiration)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	return nil
}
