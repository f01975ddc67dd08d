// Package console serves Airlock's web console at /ui/: a small
// single-page app (plain ES modules and one stylesheet, embedded in the
// binary) over the JSON API, and the console's session endpoints.
//
// The session is the API key itself, kept by the browser in an HttpOnly,
// SameSite=Strict cookie (api.SessionCookie) that the API accepts in place
// of a bearer key, with a CSRF header derived from the key
// (api.CSRFToken) on every change. Every /ui/ answer carries a strict
// Content-Security-Policy (no inline script or style, nothing from
// another origin, no framing). See docs/console.md.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
)

//go:embed assets
var embedded embed.FS

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// contentSecurityPolicy is the policy of every /ui/ answer.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Sessions checks API keys and session cookies as the API does (the
// server's *api.API).
type Sessions interface {
	AuthenticateKey(ctx context.Context, key string) (api.Session, error)
	CookieSession(r *http.Request) (api.Session, string, error)
	CheckCrossSite(r *http.Request, key string) error
	SessionKey(r *http.Request) (key string, ok bool, err error)
	SessionCookieName(r *http.Request) string
	Secure(r *http.Request) bool
	WriteError(w http.ResponseWriter, r *http.Request, err error)
}

// Config configures the console.
type Config struct {
	// Sessions is the API the console's sessions are checked by.
	Sessions Sessions
	// Assets replaces the embedded assets (tests); nil: the embedded ones.
	Assets fs.FS
}

// asset is one static file, read once.
type asset struct {
	body        []byte
	etag        string
	contentType string
}

// Console is the console's HTTP handler.
type Console struct {
	cfg    Config
	assets map[string]asset // by path under assets/, e.g. "app.js", "pages/sandboxes.js"
}

// New reads the assets and builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Sessions == nil {
		return nil, errors.New("console: Config.Sessions is required")
	}
	fsys := cfg.Assets
	if fsys == nil {
		sub, err := fs.Sub(embedded, "assets")
		if err != nil {
			return nil, fmt.Errorf("console: embedded assets: %w", err)
		}
		fsys = sub
	}
	c := &Console{cfg: cfg, assets: map[string]asset{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		c.assets[p] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:16]) + `"`, contentType: contentType(p)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: read assets: %w", err)
	}
	if _, ok := c.assets["index.html"]; !ok {
		return nil, errors.New("console: the assets have no index.html")
	}
	return c, nil
}

// contentType is the media type of an asset by its extension.
func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".json", ".map":
		return "application/json"
	}
	return "application/octet-stream"
}

// Handler answers everything under Prefix.
func (c *Console) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if c.cfg.Sessions.Secure(r) {
			// Reached over https (directly or behind a TLS proxy): the
			// browser must never come back over plain http, where the
			// session cookie would not be sent and could be overwritten.
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		rest := strings.TrimPrefix(r.URL.Path, Prefix)
		switch {
		case r.URL.Path == Prefix || r.URL.Path == Prefix+"index.html":
			c.serveAsset(w, r, "index.html")
		case rest == "session":
			c.session(w, r)
		case strings.HasPrefix(rest, "assets/"):
			c.serveAsset(w, r, strings.TrimPrefix(rest, "assets/"))
		default:
			c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeNotFound,
				"no such console page: the console's pages are under %s#/…", Prefix))
		}
	})
}

// securityHeaders are set on every /ui/ answer.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// serveAsset answers one static file, revalidated by its content hash.
func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeMethodNotAllowed, "%s is not allowed here", r.Method))
		return
	}
	a, ok := c.assets[name]
	if !ok || strings.Contains(name, "..") {
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeNotFound, "no such console asset"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("ETag", a.etag)
	// Not versioned by name: the browser asks again each time and gets
	// 304 while the content is the same.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
