package e2b

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Signed /files URLs without a sandbox (URL mode).
//
// With E2B_SANDBOX_URL the SDK builds uploadUrl/downloadUrl as
// <E2B_SANDBOX_URL>/files?path=…&username=…&signature=…: no header, no
// host names the sandbox, and the URL is meant for clients that send
// neither. The signature does: it is SHA-256 over the path, operation,
// user and the sandbox's access token, which only the server and that
// sandbox's holders know. The gateway finds the one live sandbox whose
// token (current or still verifying) makes the signature match, then
// answers the request as if it had named that sandbox, through the same
// checks (authorizeEnvd verifies the signature again).
//
// The index is a cache of the live sandboxes and their access tokens: a
// lookup hashes its candidates, and no request lists the store while the
// index is fresh. It goes stale when the store changes (Config.Changes,
// watched by RunSignedIndex: a sandbox created or deleted anywhere) and
// signedTokenTTL after its last listing (a lost notification, a key
// rotation); without Changes it is stale at every miss. A miss on a stale
// index lists the live sandboxes again unless a listing began after the
// request arrived (concurrent misses share one), so every sandbox created
// before a request is found; listings are at least signedListGap apart
// (at most 20 a second, whatever anyone sends), and a miss on a fresh
// index lists nothing: unknown signatures cost hashing only. A sandbox's
// tokens are minted once and kept for signedTokenTTL (a key rotation
// shows after that). A hit is checked against the store (one read of that
// sandbox): a deleted sandbox leaves the index at once and its URL is
// refused. At most maxSignedSandboxes are searched, two searches at once
// (others wait for their turn, bounded by their context).

// signedListGap is the least time between two listings of the live
// sandboxes.
const signedListGap = 50 * time.Millisecond

// signedTokenTTL is how long a sandbox's minted tokens are reused.
const signedTokenTTL = time.Minute

// maxSignedSandboxes bounds the sandboxes one search considers.
const maxSignedSandboxes = 100_000

type signedEntry struct {
	sb     model.Sandbox
	tokens []string
	minted time.Time
}

// signedIndex is the live sandboxes' tokens, listed again on demand.
type signedIndex struct {
	mu      sync.Mutex
	listed  time.Time // when the last listing began
	entries []signedEntry
	// watched: RunSignedIndex marks the index stale on every store change;
	// stale: one came since the last listing began (or none was made).
	watched, stale bool
	slots          chan struct{}
}

func newSignedIndex() *signedIndex { return &signedIndex{stale: true, slots: make(chan struct{}, 2)} }

// RunSignedIndex watches Config.Changes until ctx ends, marking the index
// of signed-URL candidates stale on every change, so that a miss lists the
// store only when something may have changed. Without Changes or
// LiveSandboxes it returns at once (every miss is then stale).
func (g *Gateway) RunSignedIndex(ctx context.Context) {
	if g.cfg.Changes == nil || g.cfg.LiveSandboxes == nil {
		return
	}
	changes := g.cfg.Changes(ctx)
	ix := g.signed
	ix.mu.Lock()
	ix.watched, ix.stale = true, true // what changed before the watch began
	ix.mu.Unlock()
	defer func() {
		ix.mu.Lock()
		ix.watched = false
		ix.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			ix.mu.Lock()
			ix.stale = true
			ix.mu.Unlock()
		}
	}
}

// drop removes a sandbox from the index (found deleted by a hit).
func (ix *signedIndex) drop(id model.SandboxID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.entries = slices.DeleteFunc(slices.Clone(ix.entries), func(e signedEntry) bool { return e.sb.ID == id })
}

// signedFiles answers GET/POST /files carrying a signature and no sandbox.
func (g *Gateway) signedFiles(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	arrived := g.cfg.Now()
	q := r.URL.Query()
	sig := q.Get("signature")
	refuse := func() {
		writeError(w, http.StatusUnauthorized, "a /files URL without a sandbox (E2B_SANDBOX_URL) needs a signature made with a live sandbox's access token (uploadUrl, downloadUrl)")
	}
	if g.cfg.LiveSandboxes == nil || !wellFormedSignature(sig) {
		refuse()
		return
	}
	select {
	case g.signed.slots <- struct{}{}:
		defer func() { <-g.signed.slots }()
	case <-ctx.Done():
		return
	}
	op := opRead
	if r.Method == http.MethodPost {
		op = opWrite
	}
	find := func(entries []signedEntry) (model.Sandbox, bool) {
		for _, e := range entries {
			for _, tok := range e.tokens {
				if signatureMatches(sig, q.Get("signature_expiration"), q.Get("path"), op, q.Get("username"), tok) {
					return e.sb, true
				}
			}
		}
		return model.Sandbox{}, false
	}
	sb, ok := find(g.signedEntries(ctx, time.Time{}))
	if !ok {
		entries, err := g.signedEntriesErr(ctx, arrived)
		if err != nil {
			g.cfg.Logger.Error("e2b: live sandboxes for a signed URL", "err", err)
			writeError(w, http.StatusInternalServerError, "cannot check the URL signature")
			return
		}
		sb, ok = find(entries)
	}
	if ok {
		// The index may predate the sandbox's delete: its URL dies
		// with it.
		cur, err := g.cfg.Sandboxes.GetSandboxByID(ctx, sb.ID)
		if err != nil || cur.State == model.StateDeleted || cur.ProjectID != sb.ProjectID {
			g.signed.drop(sb.ID)
			ok = false
		}
	}
	if !ok {
		refuse()
		return
	}
	g.sandbox(w, r, Route{Sandbox: sb.ID, Port: EnvdPort})
}

// signedEntries returns the index; with since set, one whose listing
// began at or after since (listing the live sandboxes again if needed).
// Without since it never lists (an error is then an empty index).
func (g *Gateway) signedEntries(ctx context.Context, since time.Time) []signedEntry {
	entries, _ := g.signedEntriesErr(ctx, since)
	return entries
}

func (g *Gateway) signedEntriesErr(ctx context.Context, since time.Time) ([]signedEntry, error) {
	ix := g.signed
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if since.IsZero() || !ix.listed.Before(since) {
		return ix.entries, nil
	}
	if ix.watched && !ix.stale && g.cfg.Now().Sub(ix.listed) < signedTokenTTL {
		// Nothing changed since the last listing: a miss is a miss.
		return ix.entries, nil
	}
	// Listings are spaced signedListGap apart whatever the load of
	// unknown signatures (anyone may send them): a miss waits for the next.
	if wait := signedListGap - g.cfg.Now().Sub(ix.listed); wait > 0 && !ix.listed.IsZero() {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	began := g.cfg.Now()
	ix.stale = false // a change from now on makes it stale again
	sbs, err := g.cfg.LiveSandboxes(ctx)
	if err != nil {
		ix.stale = true
		return nil, err
	}
	if len(sbs) > maxSignedSandboxes {
		sbs = sbs[:maxSignedSandboxes]
	}
	known := make(map[model.SandboxID]signedEntry, len(ix.entries))
	for _, e := range ix.entries {
		known[e.sb.ID] = e
	}
	entries := make([]signedEntry, 0, len(sbs))
	for _, sb := range sbs {
		if sb.ProjectID == model.SystemProject || sb.State == model.StateDeleted {
			continue
		}
		if e, ok := known[sb.ID]; ok && e.sb.ProjectID == sb.ProjectID && began.Sub(e.minted) < signedTokenTTL {
			e.sb = sb
			entries = append(entries, e)
			continue
		}
		toks, err := g.cfg.Tokens(sb.ID, sb.ProjectID)
		if err != nil {
			ix.stale = true
			return nil, fmt.Errorf("tokens of %s: %w", sb.ID, err)
		}
		entries = append(entries, signedEntry{sb: sb, tokens: toks, minted: began})
	}
	ix.entries, ix.listed = entries, began
	return entries, nil
}
