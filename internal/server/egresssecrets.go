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
	// live reports whether a sandbox is registered: a lookup that ends
	// after its sandbox was forgotten does not remember it again.
	live func(model.SandboxID) bool

	mu       sync.Mutex
	projects map[model.SandboxID]model.ProjectID
	cache    map[model.ProjectID]cachedSecrets
	// gen counts each project's invalidations: a list read before one is
	// never cached after it.
	gen map[model.ProjectID]uint64
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
		projects: map[model.SandboxID]model.ProjectID{}, cache: map[model.ProjectID]cachedSecrets{}, gen: map[model.ProjectID]uint64{}}
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
		if s.live == nil || s.live(id) {
			s.projects[id] = project
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	c, ok := s.cache[project]
	gen := s.gen[project]
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
	if s.gen[project] == gen {
		s.cache[project] = cachedSecrets{at: time.Now(), secrets: out}
	}
	s.mu.Unlock()
	return out
}

// invalidate drops a project's cached secrets (the API changed them); a
// lookup that read the store before is not cached.
func (s *secretSource) invalidate(project model.ProjectID) {
	s.mu.Lock()
	delete(s.cache, project)
	s.gen[project]++
	s.mu.Unlock()
}

// forget drops a deleted sandbox's project, and the project's cached
// secrets when no other sandbox of it is known.
func (s *secretSource) forget(id model.SandboxID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	project, ok := s.projects[id]
	delete(s.projects, id)
	if !ok {
		return
	}
	for _, p := range s.projects {
		if p == project {
			return
		}
	}
	delete(s.cache, project)
	delete(s.gen, project)
}
