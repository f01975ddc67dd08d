package api

import (
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// cursorVersion is the first byte of every cursor, so the format can change.
const cursorVersion = 1

// encodeTimeCursor makes the opaque next_cursor of a listing ordered by
// (created_at, ID): base64url(version ‖ created_at as big-endian Unix
// nanoseconds ‖ ID).
func encodeTimeCursor(at time.Time, id string) string {
	b := make([]byte, 0, 9+len(id))
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixNano()))
	b = append(b, id...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeTimeCursor parses a cursor made by encodeTimeCursor whose ID parse
// accepts (so one listing's cursor is refused by another). Anything else,
// including a non-canonical spelling of a valid cursor, is a 400.
func decodeTimeCursor[ID ~string](s string, parse func(string) (ID, error)) (time.Time, ID, error) {
	bad := badRequest("cursor is not one this server issued")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 10 || b[0] != cursorVersion {
		return time.Time{}, "", bad
	}
	id, err := parse(string(b[9:]))
	if err != nil {
		return time.Time{}, "", bad
	}
	at := time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	if encodeTimeCursor(at, string(id)) != s {
		return time.Time{}, "", bad
	}
	return at, id, nil
}

// encodeCursor makes the next_cursor of a sandbox listing.
func encodeCursor(c store.SandboxCursor) string { return encodeTimeCursor(c.CreatedAt, c.ID.String()) }

// decodeCursor parses a sandbox listing's cursor.
func decodeCursor(s string) (store.SandboxCursor, error) {
	at, id, err := decodeTimeCursor(s, model.ParseSandboxID)
	return store.SandboxCursor{CreatedAt: at, ID: id}, err
}

// Listing bounds.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// parseSandboxQuery parses the query string of GET /v1/sandboxes.
func parseSandboxQuery(project model.ProjectID, q url.Values) (store.SandboxQuery, error) {
	sq := store.SandboxQuery{ProjectID: project, Limit: defaultListLimit}
	for name, vals := range q {
		switch name {
		case "state":
			for _, v := range vals {
				st, err := model.ParseSandboxState(v)
				if err != nil {
					return store.SandboxQuery{}, err
				}
				if !slices.Contains(sq.States, st) {
					sq.States = append(sq.States, st)
				}
			}
		case "metadata":
			sq.Metadata = map[string]string{}
			for _, v := range vals {
				k, val, err := model.ParseMetadataFilter(v)
				if err != nil {
					return store.SandboxQuery{}, err
				}
				if old, dup := sq.Metadata[k]; dup && old != val {
					return store.SandboxQuery{}, badRequest("metadata filter %q is given twice with different values", k)
				}
				sq.Metadata[k] = val
			}
		case "limit":
			if len(vals) != 1 {
				return store.SandboxQuery{}, badRequest("give limit once")
			}
			n, err := strconv.Atoi(vals[0])
			if err != nil || n < 1 || n > maxListLimit {
				return store.SandboxQuery{}, badRequest("limit must be an integer from 1 to %d", maxListLimit)
			}
			sq.Limit = n
		case "cursor":
			if len(vals) != 1 {
				return store.SandboxQuery{}, badRequest("give cursor once")
			}
			c, err := decodeCursor(vals[0])
			if err != nil {
				return store.SandboxQuery{}, err
			}
			sq.After = &c
		default:
			return store.SandboxQuery{}, badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
		}
	}
	if len(sq.States) == 0 {
		// Deleted sandboxes are history: listed only when asked for.
		for _, st := range model.AllSandboxStates() {
			if st != model.StateDeleted {
				sq.States = append(sq.States, st)
			}
		}
	}
	slices.Sort(sq.States)
	return sq, nil
}

// parseWait parses the wait parameter of GET /v1/operations/{id}: a Go
// duration ("30s", "1m", "500ms") from 0 to MaxWait. Absent means 0.
func parseWait(q url.Values) (time.Duration, error) {
	vals, ok := q["wait"]
	if !ok {
		return 0, nil
	}
	if len(vals) != 1 {
		return 0, badRequest("give wait once")
	}
	d, err := time.ParseDuration(vals[0])
	if err != nil || d < 0 || d > MaxWait {
		return 0, badRequest("wait must be a duration such as 30s, from 0s to %s", MaxWait)
	}
	return d, nil
}
