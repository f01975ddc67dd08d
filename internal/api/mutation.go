package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// noBody is the request type of mutating routes that take no body (DELETE).
type noBody struct{}

// call is one mutating request as its handler sees it: authenticated,
// decoded and checked against earlier uses of its Idempotency-Key.
type call[T any] struct {
	r       *http.Request
	p       principal
	in      T
	present fieldSet
	idem    *idempotency // nil without an Idempotency-Key
	now     time.Time
}

// reply is a successful response, already encoded.
type reply struct {
	status int
	body   []byte
}

// reply encodes the successful response and, if the request has an
// Idempotency-Key, the record that the handler hands to the store with its
// mutation, so both are written in one transaction.
func (c *call[T]) reply(status int, v any) (*reply, *store.IdempotencyRecord, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encode response: %w", err)
	}
	rep := &reply{status: status, body: append(b, '\n')}
	if c.idem == nil {
		return rep, nil, nil
	}
	rec, err := c.idem.record(status, rep.body)
	if err != nil {
		return nil, nil, err
	}
	return rep, rec, nil
}

// created notes the ID of the resource the call made, for its audit entry
// (requestInfo); a create handler calls it once the resource exists. A
// replay of the call's answer notes it again (replay).
func (c *call[T]) created(id string) { noteAnswer(c.r.Context(), "", id) }

// keyedCanonical is a request body with a field (a secret's value) that must
// not enter the idempotency record's request hash as it is: it gives its own
// canonical form, keyed by the raw Idempotency-Key.
type keyedCanonical interface {
	idempotencyCanonical(idempotencyKey string) ([]byte, error)
}

// mutating wraps the handler of a mutating route: it decodes the body into
// T, derives the request's identity, replays a stored response for a repeated
// Idempotency-Key (or refuses a reused one with 409), and resolves the race
// of concurrent twins through the store's *IdempotencyConflictError.
func mutating[T any](a *API, fn func(ctx context.Context, c *call[T]) (*reply, error)) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		ctx := r.Context()
		c := &call[T]{r: r, p: p, now: a.now()}
		canonical, err := decodeCall(a, r, c)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if kc, ok := any(&c.in).(keyedCanonical); ok && r.Header.Get(headerIdempotencyKey) != "" {
			if canonical, err = kc.idempotencyCanonical(r.Header.Get(headerIdempotencyKey)); err != nil {
				a.writeError(w, r, fmt.Errorf("canonicalize request: %w", err))
				return
			}
		}
		c.idem, err = newIdempotency(r, p.project, canonical, c.now)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if c.idem != nil {
			rec, found, err := a.lookupIdempotency(ctx, c.idem)
			if err != nil {
				a.writeError(w, r, err)
				return
			}
			if found {
				a.replay(w, r, c.idem, rec)
				return
			}
		}
		rep, err := fn(ctx, c)
		var conflict *store.IdempotencyConflictError
		if c.idem != nil && errors.As(err, &conflict) {
			a.replay(w, r, c.idem, conflict.Existing)
			return
		}
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		// A change to a sandbox is activity (its idle timer starts again);
		// a refused request changed nothing and is not. Reading a
		// sandbox's record is not either (agentOf counts calls into it).
		if id, perr := model.ParseSandboxID(r.PathValue("id")); perr == nil && rep.status < 300 {
			a.touch(id)
		}
		writeBody(w, rep.status, rep.body)
	}
}

// decodeCall reads and decodes the body of c's request and returns the
// canonical JSON form of the decoded value (encoding/json writes struct
// fields in declaration order and map keys sorted), so that whitespace and
// key order do not change a request's identity.
func decodeCall[T any](a *API, r *http.Request, c *call[T]) ([]byte, error) {
	if _, ok := any(&c.in).(*noBody); ok {
		var one [1]byte
		if n, _ := io.ReadFull(r.Body, one[:]); n > 0 {
			return nil, badRequest("%s %s takes no request body", r.Method, r.URL.Path)
		}
		return nil, nil
	}
	var body []byte
	if _, ok := any(&c.in).(interface{ optionalBody() }); ok && r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		body = []byte("{}") // no body: the same request as an empty object
	} else {
		var err error
		if body, err = readBody(r, a.cfg.MaxBodyBytes); err != nil {
			return nil, err
		}
	}
	var err error
	if c.present, err = decodeStrict(body, &c.in); err != nil {
		return nil, err
	}
	canonical, err := json.Marshal(c.in)
	if err != nil {
		return nil, fmt.Errorf("canonicalize request: %w", err)
	}
	return canonical, nil
}

// putIdempotency stores rec on its own, for mutations whose store call takes
// no record. They are naturally idempotent or unique-keyed (see callers), so
// a crash between the mutation and this insert cannot duplicate anything.
func (a *API) putIdempotency(ctx context.Context, rec *store.IdempotencyRecord) error {
	if rec == nil {
		return nil
	}
	if err := a.stores.idempotency.PutIdempotency(ctx, *rec); err != nil {
		return fmt.Errorf("store idempotency record: %w", err)
	}
	return nil
}
