package build

import (
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/airlockdev/airlock/internal/model"
)

// Registry credentials of imports: given with a build (POST /v1/templates
// registry_auth), kept in this runner's memory only, used by this runner
// when it runs that build and forgotten when the build ends. They are never
// stored or logged: a build run by another node, or again after a restart,
// pulls anonymously (and fails clearly where the registry wants them).

// regAuthTTL bounds how long credentials wait for their build to run.
const regAuthTTL = time.Hour

// maxRegAuths bounds the credentials waiting at once.
const maxRegAuths = 1000

type regAuth struct {
	basic authn.Basic
	at    time.Time
}

type regAuths struct {
	mu sync.Mutex
	m  map[model.BuildID]regAuth
}

func (a *regAuths) set(id model.BuildID, username, password string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if username == "" {
		delete(a.m, id)
		return
	}
	if a.m == nil {
		a.m = map[model.BuildID]regAuth{}
	}
	for k, v := range a.m {
		if now.Sub(v.at) > regAuthTTL {
			delete(a.m, k)
		}
	}
	if len(a.m) >= maxRegAuths {
		var oldest model.BuildID
		for k, v := range a.m {
			if oldest == "" || v.at.Before(a.m[oldest].at) {
				oldest = k
			}
		}
		delete(a.m, oldest)
	}
	a.m[id] = regAuth{basic: authn.Basic{Username: username, Password: password}, at: now}
}

func (a *regAuths) get(id model.BuildID) (authn.Basic, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[id]
	return v.basic, ok
}

// SetRegistryAuth keeps the credentials build id pulls with ("" forgets
// them).
func (r *Runner) SetRegistryAuth(id model.BuildID, username, password string) {
	r.auths.set(id, username, password, time.Now())
}

// registryKeychain presents basic to registry only (the registry of the
// reference pulled); every other resource is anonymous.
type registryKeychain struct {
	registry string
	basic    authn.Basic
}

func (k registryKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if res.RegistryStr() != k.registry {
		return authn.Anonymous, nil
	}
	b := k.basic
	return &b, nil
}

// keychainFor gives build id's credentials for registry, nil when it has
// none.
func (r *Runner) keychainFor(id model.BuildID, registry string) authn.Keychain {
	b, ok := r.auths.get(id)
	if !ok || registry == "" {
		return nil
	}
	return registryKeychain{registry: registry, basic: b}
}
