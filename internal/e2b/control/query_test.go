package control

import (
	"errors"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// sdkMetadata encodes a metadata filter as the E2B JS SDK does:
// encodeURIComponent of each key and value, joined as a URLSearchParams
// string, sent as a query parameter value.
func sdkMetadata(md map[string]string) string {
	inner := url.Values{}
	for k, v := range md {
		inner.Set(url.PathEscape(k), url.PathEscape(v))
	}
	return url.Values{"metadata": {inner.Encode()}}.Encode()
}

func TestParseMetadataFilter(t *testing.T) {
	tests := []struct {
		name    string
		raw     string // the request's raw query
		want    map[string]string
		wantErr bool
	}{
		{"spec example", "metadata=user%3Da%252520b", map[string]string{"user": "a b"}, false},
		{"two terms", sdkMetadata(map[string]string{"user": "a&b=c", "k/x": "100%"}), map[string]string{"user": "a&b=c", "k/x": "100%"}, false},
		{"unicode", sdkMetadata(map[string]string{"name": "héllo wörld"}), map[string]string{"name": "héllo wörld"}, false},
		{"legacy plain", "metadata=" + url.QueryEscape("a=1&b=2"), map[string]string{"a": "1", "b": "2"}, false},
		{"absent", "", map[string]string{}, false},
		{"empty", "metadata=", map[string]string{}, false},
		{"no equals", "metadata=abc", nil, true},
		{"empty key", "metadata=" + url.QueryEscape("=v"), nil, true},
		{"conflict", "metadata=a%3D1&metadata=a%3D2", nil, true},
		{"bad escape", "metadata=" + url.QueryEscape("a=%zz"), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseMetadataFilter(q["metadata"])
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if err != nil && !errors.Is(err, errBadQuery) {
				t.Fatalf("error %v does not wrap errBadQuery", err)
			}
		})
	}
}

func FuzzParseMetadataFilter(f *testing.F) {
	f.Add("user", "a b")
	f.Add("k&=%", "%25+x")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, k, v string) {
		// Round trip: whatever the SDK encodes decodes back.
		q, err := url.ParseQuery(sdkMetadata(map[string]string{k: v}))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseMetadataFilter(q["metadata"])
		if k == "" {
			if err == nil {
				t.Fatalf("empty key accepted: %v", got)
			}
			return
		}
		if err != nil {
			if strings.ContainsRune(k+v, '\uFFFD') || !validUTF8(k+v) {
				return // invalid UTF-8 does not survive the SDK's encoding either
			}
			t.Fatalf("parse %q=%q: %v", k, v, err)
		}
		if !validUTF8(k + v) {
			return
		}
		if got[k] != v || len(got) != 1 {
			t.Fatalf("got %v, want %q=%q", got, k, v)
		}
	})
}

func FuzzParseMetadataRaw(f *testing.F) {
	f.Add("user%3Da%252520b")
	f.Add("a=1&b=2")
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := parseMetadataFilter([]string{raw})
		if err != nil {
			if !errors.Is(err, errBadQuery) {
				t.Fatalf("error %v does not wrap errBadQuery", err)
			}
			return
		}
		if len(got) > maxMetadataFilters {
			t.Fatalf("%d terms accepted", len(got))
		}
		for k := range got {
			if k == "" {
				t.Fatal("empty key accepted")
			}
		}
	})
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestParseStates(t *testing.T) {
	tests := []struct {
		in      []string
		want    []e2bState
		wantErr bool
	}{
		{nil, []e2bState{statePaused, stateRunning}, false},
		{[]string{"running"}, []e2bState{stateRunning}, false},
		{[]string{"running,paused"}, []e2bState{statePaused, stateRunning}, false},
		{[]string{"paused", "paused, running"}, []e2bState{statePaused, stateRunning}, false},
		{[]string{"suspended"}, nil, true},
		{[]string{"running,"}, nil, true},
	}
	for _, tt := range tests {
		got, err := parseStates(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%q: err = %v, want error %v", tt.in, err, tt.wantErr)
		}
		if err == nil && !slices.Equal(got, tt.want) {
			t.Fatalf("%q: got %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseStates(f *testing.F) {
	f.Add("running,paused")
	f.Add(",,")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseStates([]string{s})
		if err != nil {
			return
		}
		for _, st := range got {
			if st != stateRunning && st != statePaused {
				t.Fatalf("state %q accepted", st)
			}
		}
	})
}

func TestNativeStates(t *testing.T) {
	// Every native state but failed, deleting and deleted is one of E2B's.
	var n int
	for _, s := range []e2bState{stateRunning, statePaused} {
		n += len(nativeStates(s))
	}
	if want := len(model.AllSandboxStates()) - 3; n != want {
		t.Fatalf("%d native states mapped, want %d", n, want)
	}
	if !slices.Contains(nativeStates(statePaused), model.StateSuspended) || !slices.Contains(nativeStates(stateRunning), model.StateRunning) {
		t.Fatal("suspended must be paused and running running")
	}
}

func TestPageToken(t *testing.T) {
	id := model.NewSandboxID()
	for _, o := range []order{orderAsc, orderDesc} {
		tok := pageToken{Order: o, StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: id}
		got, err := parsePageToken(tok.encode())
		if err != nil {
			t.Fatal(err)
		}
		if got != tok {
			t.Fatalf("got %+v, want %+v", got, tok)
		}
	}
	for _, bad := range []string{"", "x", "AQ", pageToken{Order: orderAsc, ID: "sbx_bad"}.encode(), pageToken{Order: orderAsc, ID: id}.encode() + "A"} {
		if _, err := parsePageToken(bad); err == nil {
			t.Fatalf("token %q accepted", bad)
		}
	}
}

func FuzzParsePageToken(f *testing.F) {
	f.Add(pageToken{Order: orderDesc, StartedAt: time.Unix(1, 2), ID: model.NewSandboxID()}.encode())
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parsePageToken(s)
		if err != nil {
			return
		}
		if tok.encode() != s {
			t.Fatalf("%q parsed to %+v which encodes as %q", s, tok, tok.encode())
		}
	})
}

func TestParseListQuery(t *testing.T) {
	tok := pageToken{Order: orderDesc, StartedAt: time.Unix(5, 0).UTC(), ID: model.NewSandboxID()}.encode()
	tests := []struct {
		raw     string
		check   func(listQuery) bool
		wantErr bool
	}{
		{"", func(q listQuery) bool {
			return q.Limit == 100 && q.Order == orderDesc && len(q.States) == 2 && q.After == nil
		}, false},
		{"limit=1&order=asc&state=running", func(q listQuery) bool {
			return q.Limit == 1 && q.Order == orderAsc && slices.Equal(q.States, []e2bState{stateRunning})
		}, false},
		{"nextToken=" + tok, func(q listQuery) bool { return q.After != nil && q.After.StartedAt.Equal(time.Unix(5, 0)) }, false},
		{"nextToken=" + tok + "&order=asc", nil, true},
		{"startedAfter=2026-01-01T00:00:00Z&template=base", func(q listQuery) bool {
			return q.StartedAfter.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) && q.Template == "base"
		}, false},
		{"limit=0", nil, true},
		{"limit=101", nil, true},
		{"limit=x", nil, true},
		{"order=up", nil, true},
		{"startedAfter=yesterday", nil, true},
		{"nextToken=zz", nil, true},
		{"unknown=1", func(q listQuery) bool { return q.Limit == 100 }, false},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseListQuery(q)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%q: err = %v, want error %v", tt.raw, err, tt.wantErr)
		}
		if err == nil && !tt.check(got) {
			t.Fatalf("%q: got %+v", tt.raw, got)
		}
	}
}

func TestPaginate(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var items []listedOut
	for i := range 5 {
		// Two share a start time: the ID breaks the tie.
		items = append(items, listedOut{SandboxID: model.NewSandboxID().String(), StartedAt: base.Add(time.Duration(i/2) * time.Second)})
	}
	for _, o := range []order{orderAsc, orderDesc} {
		for _, limit := range []int{1, 2, 5, 100} {
			q := listQuery{Order: o, Limit: limit}
			var seen []string
			for range 10 {
				page, next := paginate(slices.Clone(items), q)
				for _, it := range page {
					seen = append(seen, it.SandboxID)
				}
				if next == nil {
					break
				}
				q.After = next
			}
			if len(seen) != len(items) {
				t.Fatalf("%s limit %d: saw %d of %d", o, limit, len(seen), len(items))
			}
			sorted := slices.Clone(seen)
			slices.Sort(sorted)
			if len(slices.Compact(sorted)) != len(items) {
				t.Fatalf("%s limit %d: duplicates in %v", o, limit, seen)
			}
			first := seen[0]
			want := items[0].SandboxID
			if o == orderDesc {
				want = items[4].SandboxID
				if items[3].SandboxID > want && items[3].StartedAt.Equal(items[4].StartedAt) {
					want = items[3].SandboxID
				}
			} else if items[1].SandboxID < want {
				want = items[1].SandboxID
			}
			if first != want {
				t.Fatalf("%s limit %d: first %s, want %s", o, limit, first, want)
			}
		}
	}
}
