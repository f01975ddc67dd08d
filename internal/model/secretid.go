package model

import (
	"crypto/sha256"
	"strconv"
	"time"
)

// SecretID identifies one secret of a project for as long as it exists:
// "sec_" + 26 base32 characters. It is derived from the project, the name
// and the creation time (SecretIDOf), so a secret deleted and created
// again under the same name gets another ID, and the store needs no column
// for it.
type SecretID string

// SecretIDOf is the ID of the project's secret name created at createdAt
// (the store's microsecond precision).
func SecretIDOf(project ProjectID, name string, createdAt time.Time) SecretID {
	h := sha256.Sum256([]byte("airlock-secret-id\x00" + string(project) + "\x00" + name + "\x00" + strconv.FormatInt(createdAt.UnixMicro(), 10)))
	return SecretID("sec_" + idEncoding.EncodeToString(h[:16]))
}

// ParseSecretID parses s as a secret ID.
func ParseSecretID(s string) (SecretID, error) {
	id, err := parseID("secret ID", "sec", s)
	return SecretID(id), err
}

func (id SecretID) String() string { return string(id) }
