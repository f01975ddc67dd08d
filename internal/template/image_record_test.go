package template

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
)

// An image whose manifest was imported before is not fetched again: its
// layers stay on the registry; once its template is gone, it is pulled
// again.
func TestImportImageRemembersManifest(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	var blobs atomic.Int32
	host := serveRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				blobs.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	img := layeredImage(t)
	ref := pushImage(t, host, "airlock/layered:v1", img)
	first, err := s.ImportImage(ctx, mustRef(t, ref), ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if n := int(blobs.Load()); n < len(layers) {
		t.Fatalf("first import fetched %d blobs, want the %d layers at least", n, len(layers))
	}
	blobs.Store(0)
	again, err := s.ImportImage(ctx, mustRef(t, ref), ImageOptions{}, nil)
	if err != nil || again.Digest != first.Digest || !again.Reused {
		t.Fatalf("second import: %+v, %v; want %s reused", again, err, first.Digest)
	}
	// The config blob is read (the record is per image manifest, the config
	// is checked against it); no layer is.
	if n := blobs.Load(); n > 1 {
		t.Errorf("second import fetched %d blobs, want at most the config", n)
	}
	if ok, err := s.Remove(ctx, first.Digest, func(context.Context) (bool, error) { return true, nil }); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	blobs.Store(0)
	third, err := s.ImportImage(ctx, mustRef(t, ref), ImageOptions{}, nil)
	if err != nil || third.Digest != first.Digest || third.Reused {
		t.Fatalf("import after the template was removed: %+v, %v", third, err)
	}
	if n := int(blobs.Load()); n < len(layers) {
		t.Errorf("import after removal fetched %d blobs, want the layers again", n)
	}
}

// Credentials from the keychain reach a registry that wants them; without
// them, or wrong ones, the pull fails.
func TestImportImageBasicAuth(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	pushing := true
	host := serveRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !pushing && (!ok || u != "alice" || p != "s3cret") {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ref := pushImage(t, host, "private/img:v1", layeredImage(t))
	pushing = false
	for _, c := range []struct {
		name string
		kc   authn.Keychain
		ok   bool
	}{
		{"anonymous", nil, false},
		{"wrong password", keychainOf(authn.Basic{Username: "alice", Password: "nope"}), false},
		{"right", keychainOf(authn.Basic{Username: "alice", Password: "s3cret"}), true},
	} {
		_, err := s.ImportImage(ctx, mustRef(t, ref), ImageOptions{Keychain: c.kc}, nil)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Errorf("%s: %v, want the registry's refusal", c.name, err)
		}
	}
}

type keychainOf authn.Basic

func (k keychainOf) Resolve(authn.Resource) (authn.Authenticator, error) {
	b := authn.Basic(k)
	return &b, nil
}
