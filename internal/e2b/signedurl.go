package e2b

import (
	"context"
	"fmt"
	"net/http"
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
// checks (authorizeEnvd verifies the signature again). The tokens of the
// live sandboxes are kept for signedIndexTTL and rebuilt at most that
// often; at most maxSignedSandboxes are searched, and two searches at
// once (others wait for their turn, bounded by their context).

// signedIndexTTL is how long the index of live sandboxes' tokens is
// reused; a sandbox created since is found after a rebuild, which a miss
// triggers when the index is older than this.
const signedIndexTTL = time.Second

// maxSignedSandboxes bounds the sandboxes one search considers.
const maxSignedSandboxes = 100_000

type signedEntry struct {
	sb     model.Sandbox
	tokens []string
}

// signedIndex is the live sandboxes' tokens, rebuilt on demand.
type signedIndex struct {
	mu      sync.Mutex
	built   time.Time
	entries []signedEntry
	slots   chan struct{}
}

func newSignedIndex() *signedIndex { return &signedIndex{slots: make(chan struct{}, 2)} }

// signedFiles answers GET/POST /files carrying a signature and no sandbox.
func (g *Gateway) signedFiles(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
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
	entries, fresh, err := g.signedEntries(ctx, false)
	if err != nil {
		g.cfg.Logger.Error("e2b: live sandboxes for a signed URL", "err", err)
		writeError(w, http.StatusInternalServerError, "cannot check the URL signature")
		return
	}
	sb, ok := find(entries)
	if !ok && !fresh {
		if entries, _, err = g.signedEntries(ctx, true); err == nil {
			sb, ok = find(entries)
		}
	}
	if !ok {
		refuse()
		return
	}
	g.sandbox(w, r, Route{Sandbox: sb.ID, Port: EnvdPort})
}

// signedEntries returns the index: as it is while younger than
// signedIndexTTL; older, as it is again unless rebuild (a miss asks for
// the rebuild, so an unknown signature lists the sandboxes at most once
// per TTL). fresh says it was built by this call or within the TTL.
func (g *Gateway) signedEntries(ctx context.Context, rebuild bool) ([]signedEntry, bool, error) {
	ix := g.signed
	ix.mu.Lock()
	defer ix.mu.Unlock()
	age := g.cfg.Now().Sub(ix.built)
	if ix.entries != nil && age < signedIndexTTL {
		return ix.entries, true, nil
	}
	if ix.entries != nil && !rebuild {
		return ix.entries, false, nil
	}
	sbs, err := g.cfg.LiveSandboxes(ctx)
	if err != nil {
		return nil, false, err
	}
	if len(sbs) > maxSignedSandboxes {
		sbs = sbs[:maxSignedSandboxes]
	}
	entries := make([]signedEntry, 0, len(sbs))
	for _, sb := range sbs {
		if sb.ProjectID == model.SystemProject || sb.State == model.StateDeleted {
			continue
		}
		toks, err := g.cfg.Tokens(sb.ID, sb.ProjectID)
		if err != nil {
			return nil, false, fmt.Errorf("tokens of %s: %w", sb.ID, err)
		}
		entries = append(entries, signedEntry{sb: sb, tokens: toks})
	}
	ix.entries, ix.built = entries, g.cfg.Now()
	return entries, true, nil
}
