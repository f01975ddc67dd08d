package control

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// errBadQuery is wrapped by every query parse error (answered 400).
var errBadQuery = errors.New("bad query")

// e2bState is a sandbox state as E2B names it.
type e2bState string

const (
	stateRunning e2bState = "running"
	statePaused  e2bState = "paused"
)

// e2bStateOf maps a native state to E2B's two states. Native pending,
// creating, resuming, waking and snapshotting count as running (they become running on
// their own); pausing, paused, suspending and suspended as paused (E2B pause
// is Airlock suspend; a frozen sandbox is paused too). Failed, deleting and
// deleted sandboxes do not exist for E2B (ok false).
func e2bStateOf(s model.SandboxState) (e2bState, bool) {
	switch s {
	case model.StatePending, model.StateCreating, model.StateRunning, model.StateResuming, model.StateWaking, model.StateSnapshotting:
		return stateRunning, true
	case model.StatePausing, model.StatePaused, model.StateSuspending, model.StateSuspended:
		return statePaused, true
	}
	return "", false
}

// nativeStates lists the native states an E2B state stands for.
func nativeStates(s e2bState) []model.SandboxState {
	var out []model.SandboxState
	for _, st := range model.AllSandboxStates() {
		if e, ok := e2bStateOf(st); ok && e == s {
			out = append(out, st)
		}
	}
	return out
}

// parseStates parses E2B's state filter: comma-separated, non-exploded
// ("running,paused"), possibly given several times. No filter means both.
func parseStates(vals []string) ([]e2bState, error) {
	var out []e2bState
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			s := e2bState(strings.TrimSpace(part))
			switch s {
			case stateRunning, statePaused:
			default:
				return nil, fmt.Errorf("%w: state %q: want running or paused", errBadQuery, textclip.Bytes(string(s), maxEcho))
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		out = []e2bState{stateRunning, statePaused}
	}
	slices.Sort(out)
	return out, nil
}

// maxMetadataFilters bounds the number of metadata filter terms.
const maxMetadataFilters = 64

// parseMetadataFilter decodes E2B's metadata filter. The SDK percent-encodes
// each key and value, joins them as a query string and sends that string
// percent-encoded again as the parameter value, which the standard query
// decoding already undid once: here the value is parsed as a query string
// (the second decoding) and each key and value percent-decoded once more
// (the third). Legacy GET /sandboxes?metadata= sends a plain "k=v&k2=v2"
// query string; the third decoding leaves such values unchanged unless they
// contain '%' or '+'.
func parseMetadataFilter(vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		if v == "" {
			continue
		}
		for term := range strings.SplitSeq(v, "&") {
			if term == "" {
				continue
			}
			rawK, rawV, ok := strings.Cut(term, "=")
			if !ok {
				return nil, fmt.Errorf("%w: metadata filter term %q is not key=value", errBadQuery, textclip.Bytes(term, maxEcho))
			}
			k, err := decodeTwice(rawK)
			if err != nil {
				return nil, fmt.Errorf("%w: metadata filter key %q: %w", errBadQuery, textclip.Bytes(rawK, maxEcho), err)
			}
			val, err := decodeTwice(rawV)
			if err != nil {
				return nil, fmt.Errorf("%w: metadata filter value %q: %w", errBadQuery, textclip.Bytes(rawV, maxEcho), err)
			}
			if k == "" {
				return nil, fmt.Errorf("%w: metadata filter with an empty key", errBadQuery)
			}
			if old, dup := out[k]; dup && old != val {
				return nil, fmt.Errorf("%w: metadata filter %q given twice with different values", errBadQuery, textclip.Bytes(k, maxEcho))
			}
			out[k] = val
			if len(out) > maxMetadataFilters {
				return nil, fmt.Errorf("%w: at most %d metadata filter terms", errBadQuery, maxMetadataFilters)
			}
		}
	}
	return out, nil
}

// decodeTwice undoes the query-string encoding of one key or value (the
// second decoding) and then the SDK's own percent-encoding (the third).
func decodeTwice(s string) (string, error) {
	once, err := url.QueryUnescape(s)
	if err != nil {
		return "", fmt.Errorf("decoding: %w", err)
	}
	twice, err := url.PathUnescape(once)
	if err != nil {
		return "", fmt.Errorf("decoding again: %w", err)
	}
	return twice, nil
}

// Page size bounds of GET /v2/sandboxes.
const (
	defaultLimit = 100
	maxLimit     = 100
)

func parseLimit(vals []string) (int, error) {
	switch len(vals) {
	case 0:
		return defaultLimit, nil
	case 1:
	default:
		return 0, fmt.Errorf("%w: give limit once", errBadQuery)
	}
	n, err := strconv.Atoi(strings.TrimSpace(vals[0]))
	if err != nil || n < 1 || n > maxLimit {
		return 0, fmt.Errorf("%w: limit must be an integer from 1 to %d", errBadQuery, maxLimit)
	}
	return n, nil
}

// order is the listing order by start time.
type order string

const (
	orderAsc  order = "asc"
	orderDesc order = "desc"
)

func parseOrder(vals []string) (order, error) {
	switch len(vals) {
	case 0:
		return orderDesc, nil
	case 1:
	default:
		return "", fmt.Errorf("%w: give order once", errBadQuery)
	}
	switch o := order(strings.ToLower(strings.TrimSpace(vals[0]))); o {
	case orderAsc, orderDesc:
		return o, nil
	}
	return "", fmt.Errorf("%w: order must be asc or desc, not %q", errBadQuery, textclip.Bytes(vals[0], maxEcho))
}

// parseStartedAfter parses an RFC 3339 time; absent is the zero time.
func parseStartedAfter(vals []string) (time.Time, error) {
	switch len(vals) {
	case 0:
		return time.Time{}, nil
	case 1:
	default:
		return time.Time{}, fmt.Errorf("%w: give startedAfter once", errBadQuery)
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(vals[0]))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: startedAfter must be an RFC 3339 time: %w", errBadQuery, err)
	}
	return t, nil
}

// pageToken is the position after which the next page starts: the last
// listed sandbox's start time and ID, in the order the listing used.
type pageToken struct {
	Order     order
	StartedAt time.Time
	ID        model.SandboxID
}

const tokenVersion = 1

// encode returns the opaque X-Next-Token: base64url(version ‖ order byte
// ‖ start as big-endian Unix nanoseconds ‖ sandbox ID).
func (t pageToken) encode() string {
	b := make([]byte, 0, 10+len(t.ID))
	b = append(b, tokenVersion)
	if t.Order == orderAsc {
		b = append(b, 'a')
	} else {
		b = append(b, 'd')
	}
	b = binary.BigEndian.AppendUint64(b, uint64(t.StartedAt.UnixNano()))
	b = append(b, t.ID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parsePageToken parses a token made by encode; anything else (including
// a non-canonical spelling) is an error.
func parsePageToken(s string) (pageToken, error) {
	bad := fmt.Errorf("%w: nextToken is not one this server issued", errBadQuery)
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 11 || b[0] != tokenVersion {
		return pageToken{}, bad
	}
	var t pageToken
	switch b[1] {
	case 'a':
		t.Order = orderAsc
	case 'd':
		t.Order = orderDesc
	default:
		return pageToken{}, bad
	}
	t.StartedAt = time.Unix(0, int64(binary.BigEndian.Uint64(b[2:10]))).UTC()
	id, err := model.ParseSandboxID(string(b[10:]))
	if err != nil {
		return pageToken{}, bad
	}
	t.ID = id
	if t.encode() != s {
		return pageToken{}, bad
	}
	return t, nil
}

// listQuery is a parsed GET /v2/sandboxes (or legacy GET /sandboxes) query.
type listQuery struct {
	States       []e2bState
	Metadata     map[string]string
	Limit        int
	Order        order
	After        *pageToken
	StartedAfter time.Time // zero: no bound
	Template     string    // "": any
}

// parseListQuery parses the query of GET /v2/sandboxes. Unknown parameters
// are ignored, as the SDK may add some.
func parseListQuery(q url.Values) (listQuery, error) {
	var (
		lq  listQuery
		err error
	)
	if lq.States, err = parseStates(q["state"]); err != nil {
		return listQuery{}, err
	}
	if lq.Metadata, err = parseMetadataFilter(q["metadata"]); err != nil {
		return listQuery{}, err
	}
	if lq.Limit, err = parseLimit(q["limit"]); err != nil {
		return listQuery{}, err
	}
	if lq.Order, err = parseOrder(q["order"]); err != nil {
		return listQuery{}, err
	}
	if lq.StartedAfter, err = parseStartedAfter(q["startedAfter"]); err != nil {
		return listQuery{}, err
	}
	if v := q["nextToken"]; len(v) > 0 && v[0] != "" {
		if len(v) > 1 {
			return listQuery{}, fmt.Errorf("%w: give nextToken once", errBadQuery)
		}
		t, err := parsePageToken(v[0])
		if err != nil {
			return listQuery{}, err
		}
		if t.Order != lq.Order {
			return listQuery{}, fmt.Errorf("%w: nextToken belongs to a listing in %s order, not %s", errBadQuery, t.Order, lq.Order)
		}
		lq.After = &t
	}
	if v := q["template"]; len(v) > 0 {
		if len(v) > 1 {
			return listQuery{}, fmt.Errorf("%w: give template once", errBadQuery)
		}
		lq.Template = strings.TrimSpace(v[0])
	}
	return lq, nil
}

// parseLegacyListQuery parses legacy GET /sandboxes: running sandboxes
// only, an optional metadata filter, no paging.
func parseLegacyListQuery(q url.Values) (listQuery, error) {
	md, err := parseMetadataFilter(q["metadata"])
	if err != nil {
		return listQuery{}, err
	}
	return listQuery{States: []e2bState{stateRunning}, Metadata: md, Order: orderDesc}, nil
}

// maxEcho is how many bytes of a caller's value an error message quotes (textclip.Bytes).
const maxEcho = 80
