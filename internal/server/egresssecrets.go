package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
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
	// headers returns a registered sandbox's sealed header rules (its
	// compiled policy's), nil for none.
	headers func(model.SandboxID) *policy.Headers

	mu       sync.Mutex
	projects map[model.SandboxID]model.ProjectID
	cache    map[model.ProjectID]cachedSecrets
	// gen counts each project's invalidations: a list read before one is
	// never cached after it.
	gen map[model.ProjectID]uint64
	// rules caches each sandbox's opened header rules, by the sealed
	// form they were opened from (a new policy brings a new one).
	rules map[model.SandboxID]openedRules
}

type cachedSecrets struct {
	at      time.Time
	secrets []proxy.Secret
	values  map[secrets.Name]secrets.Value // for the header rules' placeholders
}

type openedRules struct {
	from  *policy.Headers
	rules []secrets.HeaderRule
}

// secretCacheTTL bounds how long a change made through another server
// takes to reach this one's proxy.
const secretCacheTTL = 10 * time.Second

// secretLookupTimeout bounds the store reads of one request's lookup.
const secretLookupTimeout = 5 * time.Second

func newSecretSource(st store.Store, sealer *secrets.Sealer, log *slog.Logger) *secretSource {
	return &secretSource{st: st, sealer: sealer, log: log,
		projects: map[model.SandboxID]model.ProjectID{}, cache: map[model.ProjectID]cachedSecrets{}, gen: map[model.ProjectID]uint64{},
		rules: map[model.SandboxID]openedRules{}}
}

// SecretsFor implements proxy.SecretSource: the project's secrets, then
// the sandbox's own header rules, their placeholders resolved from the
// project's secrets (a rule whose secret is missing refuses its host's
// requests). A store that does not answer yields no secrets: requests
// then go out without them (and a placeholder is not recognized as one),
// which fails closed for the secret.
func (s *secretSource) SecretsFor(id model.SandboxID) []proxy.Secret {
	project, c, ok := s.projectSecrets(id)
	if !ok {
		return nil
	}
	rules := s.headerRules(id, project)
	if len(rules) == 0 {
		return c.secrets
	}
	out := append([]proxy.Secret(nil), c.secrets...)
	lookup := func(n secrets.Name) (secrets.Value, bool) { v, ok := c.values[n]; return v, ok }
	for _, r := range rules {
		for _, h := range r.Headers {
			ps := proxy.Secret{Name: "header rule " + r.Host.String(), Hosts: []string{r.Host.String()}, Header: h.Name}
			if v, err := secrets.Resolve(h.Value, lookup); err != nil {
				ps.Refuse = err.Error()
			} else {
				ps.Value = v
			}
			out = append(out, ps)
		}
	}
	return out
}

// headerRules returns a sandbox's opened header rules (nil for none, or
// when they do not open, which is logged).
func (s *secretSource) headerRules(id model.SandboxID, project model.ProjectID) []secrets.HeaderRule {
	if s.headers == nil {
		return nil
	}
	h := s.headers(id)
	if h == nil {
		return nil
	}
	s.mu.Lock()
	o, ok := s.rules[id]
	s.mu.Unlock()
	if ok && o.from == h {
		return o.rules
	}
	rules, err := s.sealer.OpenHeaderRules(project, h)
	if err != nil {
		s.log.Warn("egress: cannot open a sandbox's header rules", "sandbox", id, "err", err)
		return nil
	}
	s.mu.Lock()
	if s.live == nil || s.live(id) {
		s.rules[id] = openedRules{from: h, rules: rules}
	}
	s.mu.Unlock()
	return rules
}

// projectSecrets returns a sandbox's project and its opened secrets.
func (s *secretSource) projectSecrets(id model.SandboxID) (model.ProjectID, cachedSecrets, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), secretLookupTimeout)
	defer cancel()
	s.mu.Lock()
	project, ok := s.projects[id]
	s.mu.Unlock()
	if !ok {
		sb, err := s.st.GetSandboxByID(ctx, id)
		if err != nil {
			s.log.Warn("egress secrets: sandbox lookup failed", "sandbox", id, "err", err)
			return "", cachedSecrets{}, false
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
		return project, c, true
	}
	recs, err := s.st.ListSecrets(ctx, project)
	if err != nil {
		s.log.Warn("egress secrets: list failed", "project", project, "err", err)
		return "", cachedSecrets{}, false
	}
	out := make([]proxy.Secret, 0, len(recs))
	values := make(map[secrets.Name]secrets.Value, len(recs))
	for _, rec := range recs {
		sec, err := s.sealer.FromRecord(rec)
		if err != nil {
			// Sealed under another key (a server that does not share
			// DATA/secrets.key): never sent, and said.
			s.log.Warn("egress secrets: cannot open a secret", "project", project, "secret", rec.Name, "err", err)
			continue
		}
		values[sec.Name] = sec.Value
		if len(sec.Hosts) == 0 {
			continue // used only by header rules' placeholders
		}
		out = append(out, proxy.Secret{
			Name:        string(sec.Name),
			Hosts:       secrets.HostStrings(sec.Hosts),
			Header:      sec.Header,
			Value:       sec.HeaderValue(),
			Placeholder: sec.Placeholder(),
		})
	}
	c = cachedSecrets{at: time.Now(), secrets: out, values: values}
	s.mu.Lock()
	if s.gen[project] == gen {
		s.cache[project] = c
	}
	s.mu.Unlock()
	return project, c, true
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
	delete(s.rules, id)
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
