package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/proxy"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// secretSource gives the proxy each sandbox's secrets: those of its
// project, opened with the server's key. The proxy asks on every request,
// so each project's opened secrets are cached until the API says they
// changed (invalidate) or for secretCacheTTL (another server sharing the
// database may have changed them). A sandbox's project never changes.
type secretSource struct {
	st     store.Store
	sealer *secrets.Sealer
	log    *slog.Logger

	mu       sync.Mutex
	projects map[model.SandboxID]model.ProjectID
	cache    map[model.ProjectID]cachedSecrets
}

type cachedSecrets struct {
	at      time.Time
	secrets []proxy.Secret
}

// secretCacheTTL bounds how long a change made through another server
// takes to reach this one's proxy.
const secretCacheTTL = 10 * time.Second

// secretLookupTimeout bounds the store reads of one request's lookup.
const secretLookupTimeout = 5 * time.Second

func newSecretSource(st store.Store, sealer *secrets.Sealer, log *slog.Logger) *secretSource {
	return &secretSource{st: st, sealer: sealer, log: log,
		projects: map[model.SandboxID]model.ProjectID{}, cache: map[model.ProjectID]cachedSecrets{}}
}

// SecretsFor implements proxy.SecretSource. A store that does not answer
// yields no secrets: requests then go out without them (and a placeholder
// is not recognized as one), which fails closed for the secret.
func (s *secretSource) SecretsFor(id model.SandboxID) []proxy.Secret {
	ctx, cancel := context.WithTimeout(context.Background(), secretLookupTimeout)
	defer cancel()
	s.mu.Lock()
	project, ok := s.projects[id]
	s.mu.Unlock()
	if !ok {
		sb, err := s.st.GetSandboxByID(ctx, id)
		if err != nil {
			s.log.Warn("egress secrets: sandbox lookup failed", "sandbox", id, "err", err)
			return nil
		}
		project = sb.ProjectID
		s.mu.Lock()
		s.projects[id] = project
		s.mu.Unlock()
	}
	s.mu.Lock()
	c, ok := s.cache[project]
	s.mu.Unlock()
	if ok && time.Since(c.at) < secretCacheTTL {
		return c.secrets
	}
	recs, err := s.st.ListSecrets(ctx, project)
	if err != nil {
		s.log.Warn("egress secrets: list failed", "project", project, "err", err)
		return nil
	}
	out := make([]proxy.Secret, 0, len(recs))
	for _, rec := range recs {
		sec, err := s.sealer.FromRecord(rec)
		if err != nil {
			// Sealed under another key (a server that does not share
			// DATA/secrets.key): never sent, and said.
			s.log.Warn("egress secrets: cannot open a secret", "project", project, "secret", rec.Name, "err", err)
			continue
		}
		out = append(out, proxy.Secret{
			Name:        string(sec.Name),
			Hosts:       secrets.HostStrings(sec.Hosts),
			Header:      sec.Header,
			Value:       sec.HeaderValue(),
			Placeholder: sec.Placeholder(),
		})
	}
	s.mu.Lock()
	s.cache[project] = cachedSecrets{at: time.Now(), secrets: out}
	s.mu.Unlock()
	return out
}

// invalidate drops a project's cached secrets (the API changed them).
func (s *secretSource) invalidate(project model.ProjectID) {
	s.mu.Lock()
	delete(s.cache, project)
	s.mu.Unlock()
}

// forget drops a deleted sandbox's project.
func (s *secretSource) forget(id model.SandboxID) {
	s.mu.Lock()
	delete(s.projects, id)
	s.mu.Unlock()
}
