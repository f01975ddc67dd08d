// Package control is E2B's control-plane REST API (create, connect, list,
// get, kill, timeout, pause, resume of sandboxes) translated to Airlock's
// native API: every call is made through internal/client with the caller's
// X-API-Key as the bearer key, so authentication, quotas, idempotency and
// multi-node routing are the native ones (the server carries those calls
// in-process, api.InProcess, never over the network).
//
// Mapping (see docs/e2b.md, "What maps to what"):
//   - E2B sandbox IDs are Airlock sandbox IDs; a malformed ID is a 404, as
//     for an unknown one.
//   - E2B "paused" is Airlock suspended (and paused: frozen); E2B pause is
//     Airlock suspend; connect/resume wakes a suspended sandbox and resumes
//     a paused one (internal/e2b/wake, as the gateway does for in-sandbox
//     traffic: one loop, one bound).
//   - E2B timeouts are Airlock deadlines (on_timeout delete, or suspend with
//     autoPause); the server's idle limit applies to E2B sandboxes too
//     (it suspends one nobody uses). E2B's timeout 0 ("end now") becomes
//     one second (Airlock's 0 means no deadline). connect only extends a
//     running sandbox's deadline; /timeout sets it (and may shorten it).
//     startedAt is the native created_at; endAt is the deadline, or, for a
//     sandbox without one (created natively), a year (model.MaxTimeout)
//     after its start.
//   - pause suspends a sandbox that is running or paused (frozen) natively;
//     409 once it is suspended or suspending.
//   - Listing reads the whole filtered native listing (states and metadata
//     filtered natively), then filters startedAfter and template, orders by
//     (start, ID) and pages with its own X-Next-Token.
//   - The templateID the caller named is kept in the reserved native
//     metadata key templateKey, hidden from E2B output; a sandbox created
//     natively shows its template digest as templateID.
//   - network.allowPublicTraffic (absent: true, as on E2B) is the native
//     sandbox's public_ports: its guest ports answer anyone through the
//     gateway, or, when false, only with the trafficAccessToken (which is
//     the envdAccessToken, the sandbox's access token).
//   - Accepted and ignored: secure (an access token is always issued),
//     autoResume (sandbox traffic always wakes a suspended sandbox),
//     pause "memory": true (the SDK's default: the suspend keeps what the
//     runtime can, memory where it checkpoints, the filesystem otherwise),
//     mcp (an object: the SDK starts the template's mcp-gateway itself
//     once the sandbox runs; the server keeps nothing).
//   - pause "memory": false is a native suspend with keep_memory false
//     (a filesystem-only suspend, on every runtime), and autoPauseMemory
//     with autoPause (lifecycle onTimeout {action: 'pause', keepMemory})
//     the native create's timeout_keep_memory, kept with the deadline for
//     its suspend (the native API refuses, 501, a runtime that cannot).
//   - Metrics (GET /sandboxes/{id}/metrics, /sandboxes/metrics) are the
//     native samples (GET /v1/sandboxes/{id}/metrics), every 5 s.
//   - Volumes are native volumes (vol_… IDs; E2B's create names no size:
//     defaultVolumeMiB); volumeMounts [{name, path}] are the native
//     volume_mounts. The token of VolumeAndToken is the native volume
//     content token (alv_…, derived, never stored), which the volume
//     content API (/volumecontent, volumecontent.go) passes on as the
//     bearer key of the native one (/v1/volumes/{id}/files).
//   - Snapshots are native saved snapshots (snp_… is the snapshotID; E2B
//     treats one as a template: Sandbox.create(snapshotID) is a native
//     create with "snapshot", DELETE /templates/{snapshotID} deletes it);
//     names are the native snapshot names. fork is the native fork, each fork waited
//     for on its own and given the E2B timeout (snapshots.go).
//   - allow_internet_access and network.allowOut/denyOut become the
//     sandbox's egress policy, deciding as E2B does (allowOut wins over
//     denyOut; network.go); PUT /sandboxes/{id}/network (updateNetwork)
//     replaces it live through the native PUT /v1/sandboxes/{id}/egress.
//     network.maskRequestHost is kept in the reserved metadata key
//     MaskKey; the gateway gives it to the guest as the Host of requests
//     to its ports.
//   - network.rules (per-sandbox request transforms) become the sandbox's
//     header rules (sealed in its egress policy; "${e2b.secrets.NAME}"
//     resolved by the proxy from the project's secrets); the secrets API
//     (secrets.go) is Airlock's secrets without hosts.
//   - Refused with 501: egressProxy, httpsPorts, iam, template
//     deletion (DELETE /templates/{id} deletes snapshots only).
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// Config configures a Handler.
type Config struct {
	// Native returns a client of Airlock's own API authenticated with
	// apiKey (the caller's X-API-Key).
	Native func(apiKey string) (*client.Client, error)
	// AccessToken returns the sandbox access token (E2B envdAccessToken)
	// for a sandbox.
	AccessToken func(ctx context.Context, sb apiv1.Sandbox) (string, error)
	// VolumeToken returns the volume content token (the token of E2B's
	// VolumeAndToken) for a volume the caller's key has read; nil: the
	// token is empty.
	VolumeToken func(ctx context.Context, v apiv1.Volume) (string, error)
	// Domain is returned as the sandbox `domain` (may carry :port); empty
	// → null.
	Domain string
	Logger *slog.Logger
	// TemplateFiles is the directory of E2B template builds' uploaded
	// files and build contexts (templates.go); "": E2B's template build
	// API answers 501.
	TemplateFiles string
	// TemplateHasUser reports whether the template ref has the account
	// user (E2B builds start as "user" on a base that has one); nil: no.
	TemplateHasUser func(ctx context.Context, ref, user string) (bool, error)
	// Builds keeps E2B template builds (required with TemplateFiles).
	Builds BuildRecords
	// Caller authenticates an API key as the native API does: ok is
	// false for a key that does not (required with TemplateFiles).
	Caller func(ctx context.Context, apiKey string) (c Caller, ok bool, err error)
	// Node is this server's node: the starter of the builds it starts.
	Node model.NodeID
}

// Handler answers E2B control-plane requests.
type Handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	files *tplFileStore // nil: no template builds
	pulls pullTable     // builds waiting on their fromImage's pull
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Native == nil {
		return nil, errors.New("e2b control: Config.Native is required")
	}
	if cfg.AccessToken == nil {
		return nil, errors.New("e2b control: Config.AccessToken is required")
	}
	if strings.ContainsAny(cfg.Domain, "/ \t\r\n") {
		return nil, fmt.Errorf("e2b control: domain %q must be a host name with an optional :port", cfg.Domain)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, log: log, mux: http.NewServeMux()}
	routes := []struct {
		pattern string
		fn      func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error
	}{
		{"POST /v2/sandboxes", h.create},
		{"POST /sandboxes", h.create},
		{"GET /v2/sandboxes", h.list},
		{"GET /sandboxes", h.listLegacy},
		{"GET /sandboxes/{id}", h.get},
		{"DELETE /sandboxes/{id}", h.kill},
		{"POST /v2/sandboxes/{id}/connect", h.connect},
		{"POST /sandboxes/{id}/connect", h.connect},
		{"POST /sandboxes/{id}/resume", h.resume},
		{"POST /sandboxes/{id}/timeout", h.setTimeout},
		{"POST /sandboxes/{id}/refreshes", h.refresh},
		{"POST /sandboxes/{id}/pause", h.pause},
		{"GET /sandboxes/{id}/metrics", h.metrics},
		{"GET /sandboxes/metrics", h.listMetrics},
		{"POST /volumes", h.createVolume},
		{"GET /volumes", h.listVolumes},
		{"GET /volumes/{id}", h.getVolume},
		{"DELETE /volumes/{id}", h.deleteVolume},
		{"PUT /sandboxes/{id}/network", h.updateNetwork},
		{"POST /secrets", h.createSecret},
		{"GET /secrets", h.listSecrets},
		{"GET /secrets/{secret}", h.getSecret},
		{"POST /secrets/{secret}", h.updateSecret},
		{"DELETE /secrets/{secret}", h.deleteSecret},
		{"POST /sandboxes/{id}/snapshots", h.createSnapshot},
		{"GET /snapshots", h.listSnapshots},
		{"DELETE /templates/{id}", h.deleteTemplate},
		{"POST /sandboxes/{id}/fork", h.fork},
	}
	if cfg.TemplateFiles != "" {
		if cfg.Builds == nil || cfg.Caller == nil || cfg.Node == "" {
			return nil, errors.New("e2b control: template builds need Config.Builds, Config.Caller and Config.Node")
		}
		var err error
		if h.files, err = newTplFileStore(cfg.TemplateFiles); err != nil {
			return nil, err
		}
		routes = append(routes, h.templateRoutes()...)
		h.mux.HandleFunc("PUT /templates/{templateID}/files/{hash}", h.upload)
	}
	for _, rt := range routes {
		h.mux.Handle(rt.pattern, h.authed(rt.fn, maxBody))
	}
	for _, rt := range h.volumeContentRoutes() {
		// A file's bytes: bounded by the native API (the volume's size).
		h.mux.Handle(rt.pattern, h.authed(rt.fn, -1))
	}
	h.mux.HandleFunc("/", h.unsupported)
	return h, nil
}

// Owns reports whether path is an E2B control path this handler answers
// (so the gateway can route): the E2B API's families. Airlock's native
// routes start with /v1/, /data/, /healthz, /readyz or /openapi.json: no
// overlap.
func Owns(path string) bool {
	for _, f := range [...]string{
		"/sandboxes", "/v2/sandboxes",
		"/templates", "/v2/templates", "/v3/templates",
		"/snapshots", "/volumes", "/volumecontent", "/secrets",
	} {
		if rest, ok := strings.CutPrefix(path, f); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// ServeHTTP answers an E2B control-plane request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !Owns(r.URL.Path) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not an E2B API path", r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// unsupported answers an E2B call Airlock does not implement.
func (h *Handler) unsupported(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, fmt.Sprintf("%s %s is not supported by Airlock's E2B API", r.Method, r.URL.Path))
}

// apiKey returns the caller's key: X-API-Key, or (old SDKs with
// E2B_ACCESS_TOKEN) a bearer token.
func apiKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(tok)
	}
	return ""
}

// authed wraps a route: it requires a key, bounds the body to limit
// bytes (negative: no bound here) and answers the route's error.
func (h *Handler) authed(fn func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := apiKey(r)
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing X-API-Key header")
			return
		}
		c, err := h.cfg.Native(key)
		if err != nil {
			// A key the native client refuses (e.g. with whitespace)
			// cannot be valid.
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		if limit >= 0 {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		if err := fn(r.Context(), w, r, c); err != nil {
			h.writeErr(w, r, err)
		}
	})
}

// decodeBody decodes an optional JSON body into v (an empty body leaves v
// as is). Chunked bodies are fine; over maxBody is a 413.
func decodeBody(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", maxBody)}
		}
		return badRequest("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return badRequest("request body is not valid JSON for this call: %v", err)
	}
	return nil
}

// writeErr answers err: an *httpError with its status, a native API error
// with the native status (and its Retry-After, which the SDK's retry of a
// 429 needs), anything else as a 502 (the native API failed below HTTP).
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	if he, ok := asHTTPError(err); ok {
		writeError(w, he.status, he.msg)
		return
	}
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status <= 599 {
		if ae.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(ae.RetryAfter/time.Second)))
		}
		writeError(w, ae.Status, ae.Error())
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The caller went away; nobody reads the answer.
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusGatewayTimeout, err.Error())
		return
	}
	var of *client.OperationFailedError
	if errors.As(err, &of) {
		writeError(w, failedOpStatus(of.Operation), err.Error())
		return
	}
	h.log.Warn("e2b control: native API call failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "Airlock API: "+err.Error())
}

// failedOpStatus is the status for a native operation that failed: its
// code's E2BOperationStatus in apiv1's error vocabulary (503, the SDK's
// ServiceBusyError, for a lack of capacity or availability; 504 for a
// resume that timed out), else 500.
func failedOpStatus(op apiv1.Operation) int {
	if op.Error != nil {
		if s, ok := apiv1.LookupError(op.Error.Code); ok && s.E2BOperationStatus != 0 {
			return s.E2BOperationStatus
		}
	}
	return http.StatusInternalServerError
}

// writeError writes E2B's error body {"code": status, "message": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"code":500,"message":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
