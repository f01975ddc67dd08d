package api

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Header names of the idempotency protocol.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// idempotencySalt separates this use of HKDF from any other.
const idempotencySalt = "airlock idempotency record v1"

// idempotency is the state of one mutating request made with an
// Idempotency-Key. The raw key never leaves it: the store sees SHA-256(key),
// and the response body sealed with AES-256-GCM under a key derived from
// the raw key by HKDF-SHA256, so a reader of the database learns neither the
// key nor the secrets a response may carry (API key and attachment tokens).
type idempotency struct {
	project     model.ProjectID
	keyHash     []byte
	aead        cipher.AEAD
	method      string
	path        string
	requestHash []byte
	now         time.Time
}

// newIdempotency parses the request's Idempotency-Key header. It returns nil
// (and no error) when the header is absent. canonical is the canonical JSON
// form of the decoded request body, so that whitespace and key order do not
// change the request's identity.
func newIdempotency(r *http.Request, project model.ProjectID, canonical []byte, now time.Time) (*idempotency, error) {
	vals := r.Header.Values(headerIdempotencyKey)
	if len(vals) == 0 {
		return nil, nil
	}
	if len(vals) > 1 {
		return nil, badRequest("send one Idempotency-Key header, not %d", len(vals))
	}
	key, err := model.ParseIdempotencyKey(vals[0])
	if err != nil {
		return nil, err
	}
	keyHash := sha256.Sum256([]byte(key))
	sealKey, err := hkdf.Key(sha256.New, []byte(key), []byte(idempotencySalt), string(project), 32)
	if err != nil {
		return nil, fmt.Errorf("derive idempotency sealing key: %w", err)
	}
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, fmt.Errorf("idempotency cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("idempotency cipher: %w", err)
	}
	path := r.URL.EscapedPath()
	return &idempotency{
		project:     project,
		keyHash:     keyHash[:],
		aead:        aead,
		method:      r.Method,
		path:        path,
		requestHash: requestHash(r.Method, path, canonical),
		now:         now,
	}, nil
}

// requestHash is SHA-256 over the method, the path and the canonical body.
func requestHash(method, path string, canonical []byte) []byte {
	return framedHash([]byte(method), []byte(path), canonical)
}

// framedHash is SHA-256 over the parts, each prefixed with its length so no
// two lists of parts share an encoding.
func framedHash(parts ...[]byte) []byte {
	h := sha256.New()
	for _, part := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// additionalData binds a sealed body to its record (project, key, request
// and status), so a body cannot be moved to another record.
func (i *idempotency) additionalData(status int) []byte {
	var st [8]byte
	binary.BigEndian.PutUint64(st[:], uint64(status))
	return framedHash([]byte(i.project), i.keyHash, i.requestHash, st[:])
}

// record returns the record to store with a successful response.
func (i *idempotency) record(status int, body []byte) (*store.IdempotencyRecord, error) {
	nonce := make([]byte, i.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("idempotency nonce: %w", err)
	}
	return &store.IdempotencyRecord{
		ProjectID:   i.project,
		KeyHash:     i.keyHash,
		Method:      i.method,
		Path:        i.path,
		RequestHash: i.requestHash,
		Status:      status,
		SealedBody:  i.aead.Seal(nonce, nonce, body, i.additionalData(status)),
		CreatedAt:   i.now,
	}, nil
}

// sameRequest reports whether rec was stored for this very request.
func (i *idempotency) sameRequest(rec store.IdempotencyRecord) bool {
	return rec.Method == i.method && rec.Path == i.path && hmac.Equal(rec.RequestHash, i.requestHash)
}

// open decrypts the body of a record stored for this request.
func (i *idempotency) open(rec store.IdempotencyRecord) ([]byte, error) {
	n := i.aead.NonceSize()
	if len(rec.SealedBody) < n {
		return nil, errors.New("sealed idempotent response is truncated")
	}
	body, err := i.aead.Open(nil, rec.SealedBody[:n], rec.SealedBody[n:], i.additionalData(rec.Status))
	if err != nil {
		return nil, fmt.Errorf("open sealed idempotent response: %w", err)
	}
	return body, nil
}

// lookup returns the stored record for this key, if any.
func (a *API) lookupIdempotency(ctx context.Context, i *idempotency) (store.IdempotencyRecord, bool, error) {
	rec, err := a.stores.idempotency.GetIdempotency(ctx, i.project, i.keyHash)
	if errors.Is(err, store.ErrNotFound) {
		return store.IdempotencyRecord{}, false, nil
	}
	if err != nil {
		return store.IdempotencyRecord{}, false, fmt.Errorf("look up idempotency record: %w", err)
	}
	return rec, true, nil
}

// replay answers with a stored response, or 409 if the key was used for a
// different request.
func (a *API) replay(w http.ResponseWriter, r *http.Request, i *idempotency, rec store.IdempotencyRecord) {
	if !i.sameRequest(rec) {
		a.writeError(w, r, errorf(apiv1.CodeIdempotencyKeyReused,
			"this Idempotency-Key was used for a different request (%s %s or another body)", rec.Method, rec.Path))
		return
	}
	body, err := i.open(rec)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	noteAnswer(r.Context(), "", createdIn(body))
	w.Header().Set(headerReplayed, "true")
	writeBody(w, rec.Status, body)
}

// createdIn is the ID of what a create made, in its stored answer: the
// handler that made it noted the ID (call.created), but the record keeps
// only the answer, so a replay reads it back from there: the answer's
// "id", or its sandbox's (SandboxWithOperation); "" if it has neither.
// (The audit entry takes it only where the route names no resource, as it
// does a handler's: recordAudit.)
func createdIn(body []byte) string {
	var ans struct {
		ID      string `json:"id"`
		Sandbox *struct {
			ID string `json:"id"`
		} `json:"sandbox"`
	}
	_ = json.Unmarshal(body, &ans) // what it could read
	if ans.Sandbox != nil {
		return ans.Sandbox.ID
	}
	return ans.ID
}
