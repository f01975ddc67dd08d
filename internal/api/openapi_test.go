package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

type docOperation struct {
	Parameters []struct {
		Ref string `json:"$ref"`
	} `json:"parameters"`
	Responses map[string]json.RawMessage `json:"responses"`
	Security  *[]map[string][]string     `json:"security"`
	Plane     string                     `json:"x-airlock-plane"`
}

func docOperations(t *testing.T) map[string]docOperation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]docOperation{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
			default:
				continue
			}
			var op docOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops
}

// TestRoutesMatchDocument: every route the API serves is documented and
// every documented management route is served.
func TestRoutesMatchDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ops := docOperations(t)
	served := map[string]bool{}
	for _, rt := range e.api.routes {
		key := rt.method + " " + docPath(rt.pattern)
		served[key] = true
		op, ok := ops[key]
		if !ok {
			t.Errorf("route %s is not in the OpenAPI document", key)
			continue
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public != (rt.access.level() == publicAccess) {
			t.Errorf("%s: the document says public=%v, the route's access is %d", key, public, rt.access)
		}
		if !public {
			if _, ok := op.Responses["401"]; !ok {
				t.Errorf("%s needs a key but documents no 401", key)
			}
		}
		if rt.access.level() == admin {
			if _, ok := op.Responses["403"]; !ok {
				t.Errorf("%s is admin-only but documents no 403", key)
			}
		}
		// (The port proxy's requests are the guest's, not Airlock's mutations.)
		if (rt.method == "POST" || rt.method == "PUT" || rt.method == "DELETE") && !rt.has(guestTraffic) {
			if !slices.ContainsFunc(op.Parameters, func(p struct {
				Ref string `json:"$ref"`
			}) bool {
				return strings.HasSuffix(p.Ref, "/IdempotencyKey")
			}) {
				t.Errorf("%s is mutating but does not document Idempotency-Key", key)
			}
		}
		if _, ok := op.Responses["500"]; !ok {
			t.Errorf("%s documents no 500", key)
		}
	}
	for key, op := range ops {
		if op.Plane == "data" {
			if served[key] {
				t.Errorf("%s is a data-plane route but the management API serves it", key)
			}
			continue
		}
		if !served[key] {
			t.Errorf("the document lists %s but the API does not serve it", key)
		}
	}
	// The data-plane attach route is documented where AttachPath points.
	if _, ok := ops["GET /data/v1/processes/{process_id}/attach"]; !ok || AttachPath("proc_x") != "/data/v1/processes/proc_x/attach" {
		t.Error("the attach route and AttachPath disagree")
	}
}

// docPath is the OpenAPI path template of a route pattern: a multi-segment
// wildcard {name...}, which OpenAPI has no syntax for, is documented as
// {name} (its description says it takes slashes).
func docPath(pattern string) string { return strings.ReplaceAll(pattern, "...}", "}") }

// TestErrorCodesDocumented: the Error schema's code enum is exactly the
// codes of apiv1's error vocabulary.
func TestErrorCodesDocumented(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	got := doc.Components.Schemas["Error"].Properties["code"].Enum
	var want []string
	for _, s := range apiv1.ErrorSpecs() {
		want = append(want, s.Code)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("documented codes %v, apiv1 codes %v", got, want)
	}
}

// TestErrorStatusesDocumented: a code a route's response documents is
// answered with that response's status (apiv1's status of the code, or
// its AltStatus). A response's description names its codes first, or
// after "; " (or ", "), each followed by ":", ";", ",", "." or the end.
func TestErrorStatusesDocumented(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`(?:^|; |, )([a-z][a-z_]*[a-z])(?:[:;,.]|$)`)
	n := 0
	for name, op := range docOperations(t) {
		for status, raw := range op.Responses {
			st, err := strconv.Atoi(status)
			if err != nil || st < 400 {
				continue
			}
			var r struct {
				Ref         string `json:"$ref"`
				Description string `json:"description"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			if r.Ref != "" {
				r.Description = doc.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")].Description
			}
			for _, m := range named.FindAllStringSubmatch(r.Description, -1) {
				s, ok := apiv1.LookupError(m[1])
				if !ok {
					continue
				}
				n++
				if st != s.Status && st != s.AltStatus {
					t.Errorf("%s documents %s under %d; its status is %d", name, s.Code, st, s.Status)
				}
			}
		}
	}
	if n < 300 {
		t.Fatalf("found only %d documented codes of responses; is the pattern still right?", n)
	}
}

func TestHealthReadyAndDocument(t *testing.T) {
	t.Parallel()
	var notReady atomic.Pointer[error]
	e := newEnv(t, func(c *envConfig) {
		c.Ready = func(ctx context.Context) error {
			if err := notReady.Load(); err != nil {
				return *err
			}
			return nil
		}
	})
	var h apiv1.Health
	e.do("GET", "/healthz", "", "").want(t, http.StatusOK).decode(t, &h)
	e.do("GET", "/readyz", "", "").want(t, http.StatusOK).decode(t, &h)
	if h.Status != "ok" {
		t.Fatalf("health %+v", h)
	}
	errMigrating := errors.New("store migrating")
	notReady.Store(&errMigrating)
	e.do("GET", "/readyz", "", "").wantError(t, http.StatusServiceUnavailable, apiv1.CodeUnavailable)
	e.do("GET", "/healthz", "", "").want(t, http.StatusOK)
	r := e.do("GET", "/openapi.json", "", "").want(t, http.StatusOK)
	if string(r.body) != string(openAPIDocument) {
		t.Fatal("/openapi.json is not the embedded document")
	}
}

func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	logs := logCapture{records: make(chan slog.Record, 1000)}
	e := newEnv(t, func(c *envConfig) {
		c.Logger = slog.New(logs)
		c.Ready = func(ctx context.Context) error { panic("boom") }
	})
	e.do("GET", "/readyz", "", "").wantError(t, http.StatusInternalServerError, apiv1.CodeInternal)
	for {
		select {
		case r := <-logs.records:
			if r.Message == "handler panic" {
				// The server keeps serving.
				e.do("GET", "/healthz", "", "").want(t, http.StatusOK)
				return
			}
		default:
			t.Fatal("the panic was not logged")
		}
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.send(req{method: "GET", path: "/healthz", header: http.Header{"X-Request-Id": {"client-chosen-42"}}})
	if got := r.header.Get("X-Request-Id"); got != "client-chosen-42" {
		t.Fatalf("X-Request-Id %q, want the client's", got)
	}
	r = e.send(req{method: "GET", path: "/healthz", header: http.Header{"X-Request-Id": {"has space"}}})
	if got := r.header.Get("X-Request-Id"); got == "has space" || !strings.HasPrefix(got, "req_") {
		t.Fatalf("X-Request-Id %q, want a fresh one", got)
	}
	a := e.do("GET", "/healthz", "", "").header.Get("X-Request-Id")
	b := e.do("GET", "/healthz", "", "").header.Get("X-Request-Id")
	if a == b {
		t.Fatal("two requests share an ID")
	}
}

// TestOperationKindsDocumented: the OperationKind schema's enum is exactly
// the lifecycle table's kinds.
func TestOperationKindsDocumented(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	got := doc.Components.Schemas["OperationKind"].Enum
	var want []string
	for _, k := range model.AllOperationKinds() {
		want = append(want, string(k))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("documented operation kinds %v, lifecycle table %v", got, want)
	}
}

// TestOperationErrorCodesInVocabulary: every code a failed operation's
// error gets (model.OperationErrorCodes, set by the controller and the
// store) is a code of the API's vocabulary, so clients can look it up.
func TestOperationErrorCodesInVocabulary(t *testing.T) {
	t.Parallel()
	for _, c := range model.OperationErrorCodes() {
		if _, ok := apiv1.LookupError(c); !ok {
			t.Errorf("operation error code %q is not in apiv1's error vocabulary", c)
		}
	}
}
