package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/textclip"
)

// access says who may call a route: one level, with the flags below
// or-ed to it (member | sandboxToken).
type access int

const (
	publicAccess access = iota // no credentials
	member                     // any valid API key
	admin                      // an API key with role admin

	levels access = 1<<4 - 1 // the bits of the level
)

// Flags of a route's access: what its entry in the table states besides
// the level, so that a new route states them where it is declared.
const (
	// sandboxToken: the sandbox access token of the route's own sandbox
	// ({id}) may call it too (principal.inScope), with level member only.
	// It marks what working inside the sandbox needs (E2B's envd and
	// traffic tokens: read it, wake or resume it, commands and processes,
	// files, its ports), not what its owner decides (delete, timeouts,
	// pause and suspend, egress policy).
	sandboxToken access = 1 << (iota + 4)
	// guestTraffic: the route carries a sandbox's own traffic (the port
	// proxy), not a change to Airlock's state: no rate limit, no audit
	// entry (route.audited), no Idempotency-Key of Airlock's, and the
	// console's session cookie is refused on it (cookieAuth).
	guestTraffic
	// volumeToken: the content token of the route's own volume ({id}, by
	// ID) may call it too (principal.inScope), with level member only:
	// the volume content API (E2B's volume token).
	volumeToken
)

// level is a's level without its flags.
func (a access) level() access { return a & levels }

// route is one entry of the API's routing table.
type route struct {
	method  string
	pattern string // net/http pattern and OpenAPI path template alike
	access  access
	handle  func(w http.ResponseWriter, r *http.Request, p principal)
}

// has reports whether the route's access carries flag f.
func (rt route) has(f access) bool { return rt.access&f != 0 }

// routeTable is the single list of the API's routes; the OpenAPI document
// lists exactly these (a test checks both ways).
func (a *API) routeTable() []route {
	return append([]route{
		{"GET", "/healthz", publicAccess, a.healthz},
		{"GET", "/readyz", publicAccess, a.readyz},
		{"GET", "/openapi.json", publicAccess, a.openapi},
		{"GET", "/metrics", admin, a.metrics},

		{"POST", "/v1/sandboxes", member, mutating(a, a.createSandbox)},
		{"GET", "/v1/sandboxes", member, a.listSandboxes},
		{"GET", "/v1/watch/sandboxes", member, a.watchSandboxes},
		{"GET", "/v1/sandboxes/{id}", member | sandboxToken, a.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", member, mutating(a, a.deleteSandbox)},
		{"POST", "/v1/sandboxes/{id}/timeout", member, mutating(a, a.setSandboxTimeout)},
		{"GET", "/v1/sandboxes/{id}/metrics", member, a.sandboxMetrics},
		{"POST", "/v1/sandboxes/{id}/commands", member | sandboxToken, a.hosted(mutating(a, a.createCommand))},
		{"GET", "/v1/sandboxes/{id}/processes", member | sandboxToken, a.hosted(a.listProcesses)},
		{"GET", "/v1/sandboxes/{id}/processes/{process_id}", member | sandboxToken, a.hosted(a.getProcess)},
		{"POST", "/v1/sandboxes/{id}/processes/{process_id}/signal", member | sandboxToken, a.hosted(mutating(a, a.signalProcess))},
		{"POST", "/v1/sandboxes/{id}/processes/{process_id}/attachments", member | sandboxToken, mutating(a, a.createAttachment)},
		{"GET", "/v1/operations", member, a.listOperations},
		{"GET", "/v1/operations/{id}", member, a.getOperation},
		{"GET", "/v1/environments", member, a.listEnvironments},

		{"GET", "/v1/sandboxes/{id}/egress", member, a.hosted(a.getSandboxEgress)},
		{"PUT", "/v1/sandboxes/{id}/egress", member, a.hosted(mutating(a, a.putSandboxEgress))},
		{"GET", "/v1/sandboxes/{id}/egress/decisions", member, a.hosted(a.egressDecisions)},
		{"POST", "/v1/sandboxes/{id}/egress/explain", member, a.hosted(mutating(a, a.explainEgress))},
		{"GET", "/v1/egress-profiles", member, a.listEgressProfiles},
		{"GET", "/v1/egress-profiles/{name}", member, a.getEgressProfile},
		{"PUT", "/v1/egress-profiles/{name}", admin, mutating(a, a.putEgressProfile)},
		{"DELETE", "/v1/egress-profiles/{name}", admin, mutating(a, a.deleteEgressProfile)},
		{"GET", "/v1/secrets", member, a.listSecrets},
		{"GET", "/v1/secrets/{name}", member, a.getSecret},
		{"PUT", "/v1/secrets/{name}", member, mutating(a, a.putSecret)},
		{"DELETE", "/v1/secrets/{name}", member, mutating(a, a.deleteSecret)},

		{"POST", "/v1/volumes", member, mutating(a, a.createVolume)},
		{"GET", "/v1/volumes", member, a.listVolumes},
		{"GET", "/v1/volumes/{id}", member, a.getVolume},
		{"DELETE", "/v1/volumes/{id}", member, mutating(a, a.deleteVolume)},

		{"GET", "/v1/templates", member, a.listTemplates},
		{"POST", "/v1/templates", admin, mutating(a, a.importTemplate)},
		{"GET", "/v1/templates/{ref}", member, a.getTemplate},
		{"DELETE", "/v1/templates/{ref}", admin, mutating(a, a.deleteTemplate)},
		{"PUT", "/v1/templates/tags/{name_tag}", admin, mutating(a, a.setTemplateTag)},
		{"POST", "/v1/admin/templates/gc", admin, mutating(a, a.collectTemplates)},
		{"GET", "/v1/builds", member, a.listBuilds},
		{"GET", "/v1/builds/{id}", member, a.getBuild},
		{"GET", "/v1/builds/{id}/log", member, a.buildLog},

		{"GET", "/v1/pools", admin, a.listPools},
		{"PUT", "/v1/pools", admin, mutating(a, a.putPool)},
		{"DELETE", "/v1/pools/{id}", admin, mutating(a, a.deletePool)},
		{"POST", "/v1/admin/projects", admin, mutating(a, a.createProject)},
		{"GET", "/v1/admin/projects", admin, a.listProjects},
		{"GET", "/v1/admin/projects/{id}/quota", admin, a.getQuota},
		{"PUT", "/v1/admin/projects/{id}/quota", admin, mutating(a, a.setQuota)},
		{"POST", "/v1/admin/keys", admin, mutating(a, a.createKey)},
		{"GET", "/v1/admin/keys", admin, a.listKeys},
		{"DELETE", "/v1/admin/keys/{id}", admin, mutating(a, a.revokeKey)},
		{"POST", "/v1/admin/attach-keys/rotate", admin, mutating(a, a.rotateAttachKey)},
		{"GET", "/v1/admin/nodes", admin, a.listNodes},
		{"GET", "/v1/admin/nodes/{id}", admin, a.getNode},
		{"POST", "/v1/admin/nodes/{id}/cordon", admin, mutating(a, a.setNodeState("cordon", model.NodeCordoned))},
		{"POST", "/v1/admin/nodes/{id}/uncordon", admin, mutating(a, a.setNodeState("uncordon", model.NodeActive))},
		{"POST", "/v1/admin/nodes/{id}/drain", admin, mutating(a, a.setNodeState("drain", model.NodeDraining))},
		{"GET", "/v1/audit", admin, a.listAudit},
	}, slices.Concat(a.fileRoutes(), a.lifecycleRoutes(), a.snapshotRoutes(), a.portRoutes(), a.volumeFileRoutes())...)
}

// guard authenticates and authorizes a request before its route runs.
func (a *API) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p principal
		if rt.audited() { // audit.go: one entry once the request was answered
			defer func() {
				v := recover()
				a.recordAudit(r, rt, p, w, v != nil)
				if v != nil {
					panic(v)
				}
			}()
		}
		trusted, err := a.trustPeer(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		r = trusted
		if rt.access.level() != publicAccess {
			var err error
			p, err = a.authenticate(r, rt)
			if err != nil {
				a.writeError(w, r, err)
				return
			}
			if info := infoFrom(r.Context()); info != nil {
				info.key, info.project, info.sandbox = p.keyID, p.project, p.sandbox
			}
			if err := a.connectionAuthenticated(w, r, p); err != nil {
				a.writeError(w, r, err)
				return
			}
			if !p.inScope(rt, r) {
				a.writeError(w, r, p.scopeError())
				return
			}
			if rt.access.level() == admin && p.role != model.RoleAdmin {
				a.writeError(w, r, errorf(apiv1.CodePermissionDenied, "this needs an API key with role admin"))
				return
			}
			// A request a trusted peer forwarded was limited there.
			// A sandbox's own traffic (the port proxy) changes nothing of Airlock's.
			if rt.method != http.MethodGet && !rt.has(guestTraffic) && peerFrom(r.Context()) == nil && a.rateLimited(w, r, p) {
				return
			}
		}
		rt.handle(w, r, p)
	})
}

// dispatch routes a request, answering unknown routes (404) and wrong
// methods (405) with JSON errors instead of net/http's plain text.
func (a *API) dispatch(w http.ResponseWriter, r *http.Request) {
	h, pattern := a.mux.Handler(r)
	if pattern != "" {
		a.mux.ServeHTTP(w, r) // sets the path values
		return
	}
	// No route matched: let the mux decide between 404, 405 and a redirect
	// (unclean paths), then translate its answer.
	rec := &captureWriter{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusNotFound:
		a.writeError(w, r, notFound("no route %s %s", r.Method, textclip.Bytes(r.URL.Path, maxEcho)))
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		a.writeError(w, r, errorf(apiv1.CodeMethodNotAllowed,
			"%s is not allowed on %s (allowed: %s)", r.Method, textclip.Bytes(r.URL.Path, maxEcho), rec.header.Get("Allow")))
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// captureWriter records what net/http's fallback handlers write.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

// requestInfo is what the logging middleware learns while a request runs.
type requestInfo struct {
	id      string
	key     model.APIKeyID
	project model.ProjectID
	sandbox model.SandboxID // the sandbox of a sandbox access token

	// What the answer says, for the audit log (audit.go): the code of an
	// error answer (writeError) and the ID of what a create made
	// (call.created). The node that serves a forwarded request sends
	// both back in headers (statusWriter); the forwarding one records
	// them from there (forwardToHost).
	errorCode string
	created   string
}

type infoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(infoKey{}).(*requestInfo)
	return info
}

// noteAnswer records in ctx's requestInfo what its answer says: the
// error code, the created ID ("" leaves one as it was).
func noteAnswer(ctx context.Context, errorCode, created string) {
	info := infoFrom(ctx)
	if info == nil {
		return
	}
	if errorCode != "" {
		info.errorCode = errorCode
	}
	if created != "" {
		info.created = created
	}
}

func requestIDFrom(ctx context.Context) string {
	if info := infoFrom(ctx); info != nil {
		return info.id
	}
	return ""
}

// statusWriter remembers the status a handler answered with. It passes
// Flush through for streaming responses. The answer to a request that says
// another node forwarded it carries what info noted of the answer in
// noderoute's answer headers, which the forwarding node reads and removes.
type statusWriter struct {
	http.ResponseWriter
	info      *requestInfo
	forwarded bool // the request says it was forwarded (noderoute.Forwarded)
	status    int
	bytes     int64
}

// begin is called before the answer's header is written.
func (s *statusWriter) begin(code int) {
	if s.status != 0 {
		return
	}
	s.status = code
	if s.forwarded {
		h := s.Header()
		if s.info.errorCode != "" {
			h.Set(noderoute.HeaderErrorCode, s.info.errorCode)
		}
		if s.info.created != "" {
			h.Set(noderoute.HeaderCreatedID, s.info.created)
		}
	}
}

func (s *statusWriter) WriteHeader(code int) {
	s.begin(code)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.begin(http.StatusOK)
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes through, for handlers that assert http.Flusher (the data
// plane's file watch) rather than use an http.ResponseController.
func (s *statusWriter) Flush() {
	s.begin(http.StatusOK)
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// withRequestContext gives every request an X-Request-Id (the client's, if it
// sent a sane one) and logs it when it ends.
func (a *API) withRequestContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
		}
		info := &requestInfo{id: id}
		w.Header().Set("X-Request-Id", id)
		sw := &statusWriter{ResponseWriter: w, info: info, forwarded: noderoute.Forwarded(r)}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		attrs := []any{
			"method", r.Method, "path", r.URL.Path, "status", sw.status, "bytes", sw.bytes,
			"duration", time.Since(start), "request_id", id, "remote", r.RemoteAddr,
		}
		if info.key != "" {
			attrs = append(attrs, "key", info.key, "project", info.project)
		}
		if info.sandbox != "" {
			attrs = append(attrs, "sandbox_token", info.sandbox, "project", info.project)
		}
		a.log.InfoContext(r.Context(), "http request", attrs...)
	})
}

// recoverPanics turns a handler panic into a logged 500.
func (a *API) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.log.ErrorContext(r.Context(), "handler panic", "method", r.Method, "path", r.URL.Path,
				"request_id", requestIDFrom(r.Context()), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				return // the response has started; nothing sane can be added
			}
			noteAnswer(r.Context(), apiv1.CodeInternal, "")
			writeAPIError(w, errorf(apiv1.CodeInternal, "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

func validRequestID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "req_" + hex.EncodeToString(b[:])
}
