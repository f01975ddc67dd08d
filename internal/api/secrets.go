package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Secrets belong to the project of the key that writes them and are
// injected by the proxy into requests of that project's sandboxes to the
// secret's hosts. Values are sealed before they reach the store and never
// leave the server through the API.

// putSecretBody is PUT /v1/secrets/{name}'s body. Its idempotency identity
// holds the value only as an HMAC keyed by the Idempotency-Key (which is
// never stored), so an idempotency record does not hold a plain hash of
// the secret.
type putSecretBody apiv1.PutSecretRequest

func (b *putSecretBody) idempotencyCanonical(key string) ([]byte, error) {
	mac := hmac.New(sha256.New, []byte("airlock-secret-idempotency\x00"+key))
	mac.Write([]byte(b.Value))
	c := *b
	c.Value = fmt.Sprintf("hmac-sha256:%x", mac.Sum(nil))
	return json.Marshal(c)
}

// Bodies that may carry a sandbox's header rules, whose values may be
// credentials: their idempotency identity holds each value only as an
// HMAC keyed by the Idempotency-Key, as a secret's.
type (
	createSandboxBody apiv1.CreateSandboxRequest
	sandboxEgressBody apiv1.EgressPolicy
)

func (b *createSandboxBody) idempotencyCanonical(key string) ([]byte, error) {
	c := *b
	if c.Egress != nil {
		e := macHeaderValues(key, *c.Egress)
		c.Egress = &e
	}
	return json.Marshal(c)
}

func (b *sandboxEgressBody) idempotencyCanonical(key string) ([]byte, error) {
	return json.Marshal(macHeaderValues(key, apiv1.EgressPolicy(*b)))
}

// macHeaderValues returns p with each header rule value replaced by its
// HMAC keyed by the Idempotency-Key.
func macHeaderValues(key string, p apiv1.EgressPolicy) apiv1.EgressPolicy {
	if len(p.Headers) == 0 {
		return p
	}
	rules := make([]apiv1.HeaderRule, len(p.Headers))
	for i, r := range p.Headers {
		rules[i] = apiv1.HeaderRule{Host: r.Host, Names: r.Names, Headers: make(map[string]string, len(r.Headers))}
		for n, v := range r.Headers {
			mac := hmac.New(sha256.New, []byte("airlock-header-rule-idempotency\x00"+key))
			mac.Write([]byte(v))
			rules[i].Headers[n] = fmt.Sprintf("hmac-sha256:%x", mac.Sum(nil))
		}
	}
	p.Headers = rules
	return p
}

func (a *API) sealer() (*secrets.Sealer, error) {
	if a.cfg.Secrets == nil {
		return nil, errorf(apiv1.CodeNotSupported, "this server has no secrets key; secrets are not supported")
	}
	return a.cfg.Secrets, nil
}

func secretOut(rec model.SealedSecret) apiv1.Secret {
	hosts := rec.Hosts
	if hosts == nil {
		hosts = []string{}
	}
	md := rec.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return apiv1.Secret{
		ID: rec.ID().String(), Name: rec.Name, Hosts: hosts, Header: rec.Header, Format: rec.Format,
		Placeholder: secrets.Name(rec.Name).Placeholder(), Metadata: md, Version: rec.Version,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt,
	}
}

func (a *API) secretsChanged(c principal) {
	if a.cfg.SecretsChanged != nil {
		a.cfg.SecretsChanged(c.project)
	}
}

// putSecret: PUT /v1/secrets/{name} → 201 (created) or 200 (replaced)
// Secret. With "If-None-Match: *" it only creates: a name the project has
// is 409 already_exists.
func (a *API) putSecret(ctx context.Context, c *call[putSecretBody]) (*reply, error) {
	sealer, err := a.sealer()
	if err != nil {
		return nil, err
	}
	name, err := secrets.ParseName(c.r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	value, err := secrets.ParseValue([]byte(c.in.Value))
	if err != nil {
		return nil, err
	}
	hosts, err := secrets.ParseHosts(c.in.Hosts)
	if err != nil {
		return nil, err
	}
	header, err := secrets.ParseHeader(c.in.Header)
	if err != nil {
		return nil, err
	}
	format, err := secrets.ParseFormat(c.in.Format, header)
	if err != nil {
		return nil, err
	}
	md, err := secrets.ParseMetadata(c.in.Metadata)
	if err != nil {
		return nil, err
	}
	rec := sealer.Record(secrets.Secret{Project: c.p.project, Name: name, Hosts: hosts, Header: header, Format: format, Value: value})
	rec.Metadata = md
	rec.CreatedAt, rec.UpdatedAt = c.now, c.now
	var created bool
	switch inm := c.r.Header.Get("If-None-Match"); inm {
	case "":
		if created, err = a.cfg.Store.PutSecret(ctx, rec); err != nil {
			return nil, fmt.Errorf("put secret %s: %w", name, err)
		}
	case "*":
		err = a.cfg.Store.CreateSecret(ctx, rec)
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, errorf(apiv1.CodeAlreadyExists, "the project has a secret %s", name)
		}
		if err != nil {
			return nil, fmt.Errorf("create secret %s: %w", name, err)
		}
		created = true
	default:
		return nil, fmt.Errorf("%w: If-None-Match: only * (create, never replace) is understood", model.ErrInvalid)
	}
	if rec, err = a.cfg.Store.GetSecret(ctx, c.p.project, string(name)); err != nil {
		return nil, fmt.Errorf("read secret %s back: %w", name, err)
	}
	a.log.InfoContext(ctx, "secret set", "secret", name, "project", c.p.project, "created", created, "by", c.p.keyID)
	a.secretsChanged(c.p)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return idempotentReply(ctx, a, c, status, secretOut(rec))
}

// listSecrets: GET /v1/secrets → 200 SecretList (never values).
func (a *API) listSecrets(w http.ResponseWriter, r *http.Request, p principal) {
	list, err := a.cfg.Store.ListSecrets(r.Context(), p.project)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list secrets: %w", err))
		return
	}
	out := apiv1.SecretList{Secrets: make([]apiv1.Secret, 0, len(list))}
	for _, rec := range list {
		out.Secrets = append(out.Secrets, secretOut(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

// getSecret: GET /v1/secrets/{name} → 200 Secret (never its value).
func (a *API) getSecret(w http.ResponseWriter, r *http.Request, p principal) {
	name, err := secrets.ParseName(r.PathValue("name"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	rec, err := a.cfg.Store.GetSecret(r.Context(), p.project, string(name))
	if errors.Is(err, store.ErrNotFound) {
		a.writeError(w, r, notFound("secret %s not found", name))
		return
	}
	if err != nil {
		a.writeError(w, r, fmt.Errorf("get secret %s: %w", name, err))
		return
	}
	writeJSON(w, http.StatusOK, secretOut(rec))
}

// deleteSecret: DELETE /v1/secrets/{name} → 200 the deleted Secret.
func (a *API) deleteSecret(ctx context.Context, c *call[noBody]) (*reply, error) {
	name, err := secrets.ParseName(c.r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	rec, err := a.cfg.Store.GetSecret(ctx, c.p.project, string(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("secret %s not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	if err := a.cfg.Store.DeleteSecret(ctx, c.p.project, string(name)); errors.Is(err, store.ErrNotFound) {
		return nil, notFound("secret %s not found", name)
	} else if err != nil {
		return nil, fmt.Errorf("delete secret %s: %w", name, err)
	}
	a.log.InfoContext(ctx, "secret deleted", "secret", name, "project", c.p.project, "by", c.p.keyID)
	a.secretsChanged(c.p)
	return idempotentReply(ctx, a, c, http.StatusOK, secretOut(rec))
}
