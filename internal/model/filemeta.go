package model

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// FileMetadata is user-defined metadata of one guest file: lowercase
// HTTP-token keys (RFC 9110 tchar, as E2B's SDK sends them in X-Metadata-*
// headers) and printable ASCII values, within the bounds below. The agent
// keeps it as the file's extended attributes "user.e2b.<key>".
type FileMetadata map[string]string

// Bounds of one file's metadata: what one ext4 extended attribute block
// (4 KiB with its headers) holds whatever the sandbox's file system.
const (
	MaxFileMetadataEntries = 32
	MaxFileMetadataKey     = 128  // bytes
	MaxFileMetadataValue   = 1024 // bytes
	MaxFileMetadataBytes   = 3072 // keys and values together
)

// ErrBadFileMetadata is wrapped by every ParseFileMetadata refusal.
var ErrBadFileMetadata = errors.New("invalid file metadata")

// ParseFileMetadata checks m and returns it with its keys lowercased (two
// keys equal but for case are refused); nil or empty gives nil.
func ParseFileMetadata(m map[string]string) (FileMetadata, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > MaxFileMetadataEntries {
		return nil, fmt.Errorf("%w: %d entries, at most %d", ErrBadFileMetadata, len(m), MaxFileMetadataEntries)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key named is always the same one
	out := make(FileMetadata, len(m))
	total := 0
	for _, k := range keys {
		v := m[k]
		if k == "" || len(k) > MaxFileMetadataKey || !isToken(k) {
			return nil, fmt.Errorf("%w: key %q must be 1 to %d HTTP token characters (letters, digits and !#$%%&'*+-.^_`|~)", ErrBadFileMetadata, clipKey(k), MaxFileMetadataKey)
		}
		if len(v) > MaxFileMetadataValue || !isPrintableASCII(v) {
			return nil, fmt.Errorf("%w: the value of %q must be at most %d printable ASCII characters", ErrBadFileMetadata, k, MaxFileMetadataValue)
		}
		lk := strings.ToLower(k)
		if _, dup := out[lk]; dup {
			return nil, fmt.Errorf("%w: key %q is given twice (keys are case-insensitive)", ErrBadFileMetadata, lk)
		}
		total += len(lk) + len(v)
		out[lk] = v
	}
	if total > MaxFileMetadataBytes {
		return nil, fmt.Errorf("%w: %d bytes of keys and values, at most %d", ErrBadFileMetadata, total, MaxFileMetadataBytes)
	}
	return out, nil
}

func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
