// Package e2b is Airlock's E2B front door: a gateway in front of the
// server's own API that lets unmodified E2B clients drive Airlock.
//
// Requests are told apart as E2B clients send them (see docs/e2b.md, "How
// it works" and "Reaching a server inside the sandbox"): in-sandbox
// traffic carries the E2b-Sandbox-Id / E2b-Sandbox-Port headers or a
// <port>-<id>.<domain> Host; the E2B control plane is a set of paths
// (/v2/sandboxes, /sandboxes, …); everything else is Airlock's own API. In-sandbox traffic for envd's port
// is answered here by translating to Airlock's API (no envd runs in the
// guest); any other port is proxied to that port inside the sandbox
// through Airlock's ports route. A suspended or paused sandbox is woken
// first.
//
// The translators' calls of Airlock's API never leave the process: they
// go through the API's in-process transport (api.InProcess, Config.API)
// acting as the sandbox's access token would, the credential the gateway
// checked itself (or, on a public guest port, the sandbox's own public
// ports), so the API neither verifies a token nor reads the sandbox
// again to authenticate them, and no token is signed per request.
package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/control"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

// SandboxGetter reads a sandbox whatever its project (the gateway learns
// the project from the sandbox, then acts with a token scoped to it).
type SandboxGetter interface {
	GetSandboxByID(ctx context.Context, id model.SandboxID) (model.Sandbox, error)
}

// Service is a Connect-RPC service: the path prefix its procedures live
// under ("/process.Process/") and its handler.
type Service struct {
	Path    string
	Handler http.Handler
}

// SandboxAPI is Airlock's API in-process (*api.InProcess): a transport
// whose requests act as sandbox sb's access token would, without one.
type SandboxAPI interface {
	AsSandbox(project model.ProjectID, sb model.SandboxID) http.RoundTripper
}

// Config wires a Gateway.
type Config struct {
	// Native is Airlock's own API (everything that is not E2B).
	Native http.Handler
	// Control answers the E2B control plane; OwnsControl says which paths
	// are its.
	Control     http.Handler
	OwnsControl func(path string) bool
	// Process, Filesystem and Files answer envd's port.
	Process    Service
	Filesystem Service
	Files      http.Handler
	// Sandboxes finds the sandbox a request is for.
	Sandboxes SandboxGetter
	// API carries every call the gateway and the translators make of
	// Airlock's API, in-process, acting for the request's sandbox once
	// the gateway has authorized the request.
	API SandboxAPI
	// Verify checks a sandbox access token and returns the sandbox and
	// project it names. The gateway takes it only for that sandbox, of
	// that project, as the API takes one.
	Verify func(token string) (model.SandboxID, model.ProjectID, error)
	// Tokens returns every access token of a sandbox that still verifies
	// (the current one first), to check a signed /files URL: one made with
	// a token from before a key rotation stays good as long as that token
	// does.
	Tokens func(sb model.SandboxID, project model.ProjectID) ([]string, error)
	// LiveSandboxes lists every sandbox that is not deleted, of every
	// project and node, to find the sandbox of a signed /files URL that
	// names none (URL mode, signedurl.go); nil refuses such URLs.
	LiveSandboxes func(ctx context.Context) ([]model.Sandbox, error)
	// Changes, if set, is a watch of the store that receives a value after
	// sandboxes change (store.Watch): while nothing changed, a signed URL
	// of no sandbox the index knows is refused without listing the store
	// (RunSignedIndex). Nil: every such miss may list it.
	Changes func(ctx context.Context) <-chan struct{}
	// Domain is the --e2b-domain: when set, only hosts under it are
	// routed to sandboxes by name.
	Domain string
	// SelfURL is the base URL of this server's own API, which the
	// translators' clients name (their requests go through API, never
	// over the network).
	SelfURL string
	Logger  *slog.Logger
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Gateway routes E2B traffic. Create it with New.
type Gateway struct {
	cfg    Config
	self   *url.URL
	users  *guestuser.Cache
	interp *interpreters
	signed *signedIndex
	proxy  *httputil.ReverseProxy
}

// New checks cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.Native == nil, cfg.Control == nil, cfg.OwnsControl == nil,
		cfg.Process.Handler == nil, cfg.Filesystem.Handler == nil, cfg.Files == nil,
		cfg.Sandboxes == nil, cfg.API == nil, cfg.Verify == nil, cfg.Tokens == nil, cfg.Logger == nil:
		return nil, errors.New("e2b: incomplete gateway config")
	}
	self, err := url.Parse(cfg.SelfURL)
	if err != nil || self.Scheme == "" || self.Host == "" {
		return nil, fmt.Errorf("e2b: self URL %q: want scheme://host:port", cfg.SelfURL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{cfg: cfg, self: self, users: guestuser.NewCache(), interp: newInterpreters(), signed: newSignedIndex()}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewritePort,
		Transport:      portTransport{g},
		ModifyResponse: g.portResponse,
		FlushInterval:  -1, // streams (SSE, NDJSON) pass as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			g.cfg.Logger.Warn("e2b: guest port proxy failed", "err", err)
			writeError(w, http.StatusBadGateway, "the sandbox port could not be reached")
		},
	}
	return g, nil
}

// ServeHTTP sends r to the E2B control plane, a sandbox, or Airlock's API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, err := RouteOf(r, g.cfg.Domain)
	switch {
	case errors.Is(err, errNotSandbox):
		if isSignedFilesURL(r) {
			g.signedFiles(w, r)
			return
		}
		if g.cfg.OwnsControl(r.URL.Path) {
			g.cfg.Control.ServeHTTP(w, r)
			return
		}
		g.cfg.Native.ServeHTTP(w, r)
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		g.sandbox(w, r, rt)
	}
}

// notFoundMessage is E2B's client proxy's message for a sandbox that is
// not there (killed, timed out, unknown).
const notFoundMessage = "The sandbox was not found"

// writeNotRunning answers a request for sandbox id, in state, that cannot
// be served: 502 (what E2B's SDKs read as "not running": isRunning false,
// the "killed or reached its end of life" of a dropped stream) with E2B's
// client proxy's body, {code, message, sandboxId}. A sandbox being or
// already deleted is E2B's "The sandbox was not found"; another state says
// why (detail, or the state).
func writeNotRunning(w http.ResponseWriter, id model.SandboxID, state model.SandboxState, detail string) {
	msg := notFoundMessage
	if state != model.StateDeleting && state != model.StateDeleted {
		msg = detail
		if msg == "" {
			msg = fmt.Sprintf("sandbox %s is %s", id, state)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(struct {
		Code      int    `json:"code"`
		Message   string `json:"message"`
		SandboxID string `json:"sandboxId"`
	}{http.StatusBadGateway, msg, id.String()})
}

// isSignedFilesURL reports whether r is envd's /files with a signature:
// what uploadUrl and downloadUrl build in URL mode, naming no sandbox
// (Airlock's own API has no /files).
func isSignedFilesURL(r *http.Request) bool {
	return r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost) && r.URL.Query().Has("signature")
}

// writeError answers in the E2B error shape: {"code": status, "message"}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// noRedirects keeps a client from following redirects: some answers come
// from servers in sandboxes.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// nativeFor returns a client of Airlock's API that acts as sandbox sb's
// access token would, in-process.
func (g *Gateway) nativeFor(sb model.Sandbox) (*client.Client, error) {
	hc := &http.Client{Transport: g.cfg.API.AsSandbox(sb.ProjectID, sb.ID), CheckRedirect: noRedirects}
	return client.New(g.cfg.SelfURL, "", client.WithHTTPClient(hc), client.WithUserAgent("airlock-e2b-gateway"))
}

// sandbox answers in-sandbox traffic.
//
// envd's port takes the sandbox's access token (or a signed /files URL).
// Other guest ports take it too (X-Access-Token or
// E2B-Traffic-Access-Token), except on a running sandbox with public
// ports (the E2B API's default, as on E2B), for anything but the code
// interpreter (which runs code) beyond its /health. Only an authenticated
// request wakes a suspended or paused sandbox.
//
// A request without a credential for the sandbox it names gets one
// answer, refused (401, the same body), whether that sandbox is unknown,
// deleted, a pool's, paused, running, or another's: it learns nothing
// of the sandbox but what its public ports serve. Only a credential for
// the ID (a token minted for it) learns that the sandbox is gone (502,
// what E2B clients read as "not running") or how it is (envd's /health:
// 204 running, else 502).
func (g *Gateway) sandbox(w http.ResponseWriter, r *http.Request, rt Route) {
	ctx := r.Context()
	sb, err := g.cfg.Sandboxes.GetSandboxByID(ctx, rt.Sandbox)
	known := err == nil && sb.ProjectID != model.SystemProject && sb.State != model.StateDeleted
	if !known {
		// Unknown (or an unclaimed pool sandbox, which no caller owns).
		if g.hasTokenFor(r, rt, model.Sandbox{ID: rt.Sandbox}, false) {
			// E2B clients read 502 as "sandbox not running".
			writeNotRunning(w, rt.Sandbox, model.StateDeleted, "")
			return
		}
		g.refuseAnonymous(w, rt)
		return
	}
	if rt.Port == EnvdPort && r.URL.Path == "/health" {
		// isRunning(): a health check never wakes a sandbox.
		if !g.hasTokenFor(r, rt, sb, true) {
			g.refuseAnonymous(w, rt)
			return
		}
		if sb.State == model.StateRunning {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeNotRunning(w, sb.ID, sb.State, "")
		return
	}
	native, err := g.nativeFor(sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if rt.Port == EnvdPort {
		// Authenticate before waking anything.
		user, ok := g.authorizeEnvd(w, r, rt, sb)
		if !ok {
			return
		}
		if _, ok := g.ensureRunning(w, r, native, sb); !ok {
			return
		}
		g.envd(w, r, target.Target{Sandbox: sb.ID, Native: native, User: user, Users: g.users})
		return
	}
	authed := g.hasTokenFor(r, rt, sb, true)
	health := r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	public := sb.PublicPorts && (rt.Port != CodeInterpreterPort || health)
	if !authed && (!public || sb.State != model.StateRunning) {
		// Anonymous traffic wakes nothing, and is told no more of a
		// sandbox whose ports it may not reach (or not now) than of an
		// unknown one.
		g.refuseAnonymous(w, rt)
		return
	}
	sb, ok := g.ensureRunning(w, r, native, sb)
	if !ok {
		return
	}
	if rt.Port == CodeInterpreterPort && authed {
		if err := g.interp.ensure(ctx, g, native, sb); err != nil {
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
	}
	pt := portTarget{route: rt, project: sb.ProjectID}
	if mask := sb.Metadata[control.MaskKey]; mask != "" {
		// Checked at create; a host that does not check (it cannot be
		// set otherwise) leaves the guest's own address.
		if h, err := control.MaskedHost(mask, int(rt.Port)); err == nil {
			pt.host = h
		}
	}
	r = r.WithContext(context.WithValue(ctx, portKey{}, pt))
	g.proxy.ServeHTTP(w, r)
}

// refuseAnonymous is the one answer to a request without a credential for
// the sandbox it names, whatever that sandbox is (unknown, paused,
// another's, private): the same status and body for each, naming only
// what the request itself named.
func (g *Gateway) refuseAnonymous(w http.ResponseWriter, rt Route) {
	writeError(w, http.StatusUnauthorized, fmt.Sprintf(
		"port %d of sandbox %s needs the sandbox's access token (X-Access-Token or E2B-Traffic-Access-Token; for /files a valid signed URL); without one the server does not say whether the sandbox exists or runs",
		rt.Port, rt.Sandbox))
}

// hasTokenFor reports whether r carries an access token minted for
// sandbox sb (of its project when known): as envd clients send it
// (X-Access-Token) or, for ports other than envd's, as the code
// interpreter SDK does (E2B-Traffic-Access-Token).
func (g *Gateway) hasTokenFor(r *http.Request, rt Route, sb model.Sandbox, known bool) bool {
	headers := []string{"X-Access-Token", "E2B-Traffic-Access-Token"}
	if rt.Port == EnvdPort {
		headers = headers[:1]
	}
	for _, h := range headers {
		tok := r.Header.Get(h)
		if tok == "" {
			continue
		}
		id, project, err := g.cfg.Verify(tok)
		if err == nil && id == sb.ID && (!known || project == sb.ProjectID) {
			return true
		}
	}
	return false
}

// tokenOf reports whether tok is an access token of sandbox sb: signed by
// a key that verifies, naming sb and its project.
func (g *Gateway) tokenOf(tok string, sb model.Sandbox) bool {
	id, project, err := g.cfg.Verify(tok)
	return err == nil && id == sb.ID && project == sb.ProjectID
}

// envd dispatches envd's port to the translators.
func (g *Gateway) envd(w http.ResponseWriter, r *http.Request, t target.Target) {
	r = r.WithContext(target.With(r.Context(), t))
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, g.cfg.Process.Path):
		g.cfg.Process.Handler.ServeHTTP(w, r)
	case strings.HasPrefix(p, g.cfg.Filesystem.Path):
		g.cfg.Filesystem.Handler.ServeHTTP(w, r)
	case p == "/files":
		g.cfg.Files.ServeHTTP(w, r)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("envd has no %s %s here (supported: process.Process, filesystem.Filesystem, /files, /health)", r.Method, p))
	}
}

// authorizeEnvd checks an envd request's credential: the X-Access-Token
// header, or for /files a URL signed with the sandbox's token. It returns
// the user the request names (Basic auth user of an RPC, ?username= of
// /files); on failure it has answered with refuseAnonymous, as for an
// unknown sandbox.
func (g *Gateway) authorizeEnvd(w http.ResponseWriter, r *http.Request, rt Route, sb model.Sandbox) (string, bool) {
	user := ""
	if r.URL.Path == "/files" {
		user = r.URL.Query().Get("username")
	} else if u, _, ok := r.BasicAuth(); ok {
		user = u
	}
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		if !g.tokenOf(tok, sb) {
			g.refuseAnonymous(w, rt)
			return "", false
		}
		return user, true
	}
	q := r.URL.Query()
	if r.URL.Path == "/files" && q.Get("signature") != "" {
		op := opRead
		if r.Method == http.MethodPost {
			op = opWrite
		}
		tokens, err := g.cfg.Tokens(sb.ID, sb.ProjectID)
		if err != nil {
			g.cfg.Logger.Error("e2b: sandbox tokens", "sandbox", sb.ID, "err", err)
			writeError(w, http.StatusInternalServerError, "cannot check the URL signature")
			return "", false
		}
		for _, tok := range tokens {
			if err = checkFileSignature(q.Get("signature"), q.Get("signature_expiration"), q.Get("path"), op, user, tok, g.cfg.Now()); err == nil {
				return user, true
			}
			if errors.Is(err, errSignatureExpired) {
				// E2B's answer, to a caller who held the token.
				writeError(w, http.StatusUnauthorized, expiredMessage)
				return "", false
			}
		}
		g.cfg.Logger.Debug("e2b: signed /files URL refused", "sandbox", sb.ID, "err", err)
	}
	g.refuseAnonymous(w, rt)
	return "", false
}
