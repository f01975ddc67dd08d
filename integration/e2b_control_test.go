package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/control"
	"github.com/airlockdev/airlock/internal/model"
)

// e2bCaller makes raw E2B control-plane calls, as the SDK does.
type e2bCaller struct {
	t    *testing.T
	ctx  context.Context
	base string
	key  string
	http *http.Client
}

type e2bReply struct {
	status int
	header http.Header
	body   []byte
}

// call sends body (JSON-encoded unless nil) with Transfer-Encoding:
// chunked, like the SDK.
func (c e2bCaller) call(method, path, key string, body any) e2bReply {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		// Hiding the length makes net/http send the body chunked.
		rd = struct{ io.Reader }{bytes.NewReader(data)}
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return e2bReply{status: resp.StatusCode, header: resp.Header, body: data}
}

// ok calls and checks the status, decoding the answer into out (if set).
func (c e2bCaller) ok(method, path string, body any, status int, out any) e2bReply {
	c.t.Helper()
	rep := c.call(method, path, c.key, body)
	if rep.status != status {
		c.t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, rep.status, status, rep.body)
	}
	if out != nil {
		if err := json.Unmarshal(rep.body, out); err != nil {
			c.t.Fatalf("%s %s: decoding %q: %v", method, path, rep.body, err)
		}
	}
	return rep
}

// fails calls and checks E2B's error shape: {"code": status, "message"}.
func (c e2bCaller) fails(method, path, key string, body any, status int, msgPart string) {
	c.t.Helper()
	rep := c.call(method, path, key, body)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if rep.status != status || json.Unmarshal(rep.body, &e) != nil || e.Code != status || !strings.Contains(e.Message, msgPart) {
		c.t.Fatalf("%s %s: HTTP %d %s, want %d with JSON code %d and a message with %q", method, path, rep.status, rep.body, status, status, msgPart)
	}
}

type e2bSandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

type e2bListed struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	State       string            `json:"state"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	EnvdVersion string            `json:"envdVersion"`
	// SandboxDetail only.
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// TestE2BControl drives the E2B control-plane API over a real server on
// runc: create (v2 and v1 paths, chunked bodies), get, list (metadata,
// state, paging), timeout, pause (suspend), connect (wake: 201; running:
// 200), resume, refresh, kill, and the error contract (401, 404, 409, 501
// JSON bodies). Sandboxes created natively show in the E2B list and the
// other way round.
func TestE2BControl(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	const domain = "sbx.test:49983"
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{"--e2b-domain", domain}})
	s.start()
	ctx := ctxFor(t, 5*time.Minute)
	native := s.client()
	// The server's own E2B front door, as the SDKs reach it: it calls the
	// native API in-process (the only caller that may set the reserved
	// metadata keys it keeps the E2B template in).
	httpc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(httpc.CloseIdleConnections)
	e := e2bCaller{t: t, ctx: ctx, base: s.url, key: s.key, http: httpc}

	// Auth and unsupported families.
	e.fails("GET", "/v2/sandboxes", "", nil, 401, "X-API-Key")
	e.fails("GET", "/v2/sandboxes", "e2b_00112233445566778899aabbccddeeff", nil, 401, "")
	e.fails("POST", "/v2/sandboxes", "alk_bogus", map[string]any{"templateID": "base"}, 401, "")
	// What is still not supported answers 501 with a clear message.
	e.fails("DELETE", "/templates/base", s.key, nil, 501, "only snapshots")
	// The families issue 28 added answer for themselves: bad input and
	// absent sandboxes as E2B does.
	e.fails("POST", "/v3/templates", s.key, map[string]any{}, 400, "name is required")
	e.fails("POST", "/sandboxes/sbx_x/fork", s.key, map[string]any{}, 404, "not found")
	e.fails("POST", "/sandboxes/sbx_x/snapshots", s.key, map[string]any{}, 404, "not found")
	e.fails("PUT", "/sandboxes/sbx_x/network", s.key, map[string]any{}, 404, "not found")
	e.fails("GET", "/volumecontent/v/file?path=/x", s.key, nil, 404, "not found")
	e.fails("POST", "/v2/sandboxes", s.key, map[string]any{"templateID": "base", "volumeMounts": []any{map[string]string{"name": "no-such-volume", "path": "/data"}}}, 404, "")
	e.fails("POST", "/v2/sandboxes", s.key, map[string]any{"templateID": "no-such-template"}, 404, "")
	missing := model.NewSandboxID().String()
	e.fails("GET", "/sandboxes/"+missing, s.key, nil, 404, "not found")
	e.fails("POST", "/v2/sandboxes/"+missing+"/connect", s.key, map[string]any{}, 404, "not found")
	e.fails("POST", "/sandboxes/"+missing+"/pause", s.key, map[string]any{}, 404, "not found")

	// Create through both paths, and one natively.
	var a, b e2bSandbox
	rep := e.ok("POST", "/v2/sandboxes", map[string]any{
		"templateID": "base", "timeout": 120,
		"metadata": map[string]string{"owner": "e2b test&co", "run": "a"},
		"envVars":  map[string]string{"E2B_X": "1"},
	}, 201, &a)
	if a.TemplateID != "base" || a.EnvdVersion != control.EnvdVersion || a.ClientID == "" ||
		a.EnvdAccessToken == "" || a.Domain == nil || *a.Domain != domain || a.TrafficAccessToken == nil || *a.TrafficAccessToken != a.EnvdAccessToken {
		t.Fatalf("create answered %+v", a)
	}
	if !bytes.Contains(rep.body, []byte(`"trafficAccessToken":"`+a.EnvdAccessToken+`"`)) {
		t.Fatalf("trafficAccessToken is not the access token: %s", rep.body)
	}
	e.ok("POST", "/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"run": "b"}}, 201, &b)
	nat := createSandbox(ctx, t, native, apiv1.CreateSandboxRequest{Metadata: map[string]string{"run": "native"}})
	idA, idB := model.SandboxID(a.SandboxID), model.SandboxID(b.SandboxID)

	// E2B sandboxes show natively, with what E2B asked for.
	nl, err := native.ListSandboxes(ctx, client.ListSandboxesQuery{Metadata: []client.MetadataFilter{{Key: "run", Value: "a"}}})
	if err != nil || len(nl.Sandboxes) != 1 || nl.Sandboxes[0].ID != a.SandboxID {
		t.Fatalf("native list run=a: %+v, %v", nl, err)
	}
	na := nl.Sandboxes[0]
	if na.Env["E2B_X"] != "1" || na.State != "running" || na.TimeoutAt == nil || na.OnTimeout != "delete" || na.IdleTimeout <= 0 { // the server's idle limit applies
		t.Fatalf("native view of the E2B sandbox: %+v", na)
	}
	if d := time.Until(*na.TimeoutAt); d < 60*time.Second || d > 121*time.Second {
		t.Fatalf("deadline in %s, want about 120s", d)
	}

	// Get.
	var detail e2bListed
	e.ok("GET", "/sandboxes/"+a.SandboxID, nil, 200, &detail)
	if detail.State != "running" || detail.TemplateID != "base" || detail.EnvdVersion != control.EnvdVersion ||
		detail.CPUCount < 1 || detail.MemoryMB < 1 || detail.DiskSizeMB < 1 || detail.EnvdAccessToken == "" ||
		detail.Domain == nil || len(detail.Metadata) != 2 || detail.Metadata["owner"] != "e2b test&co" || !detail.EndAt.Equal(*na.TimeoutAt) {
		t.Fatalf("get: %+v (native %+v)", detail, na)
	}

	list := func(query string) ([]e2bListed, string) {
		t.Helper()
		var out []e2bListed
		rep := e.ok("GET", "/v2/sandboxes"+query, nil, 200, &out)
		return out, rep.header.Get("X-Next-Token")
	}
	ids := func(ls []e2bListed) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.SandboxID)
		}
		return out
	}

	// A natively created sandbox shows in the E2B list, with its digest.
	all, next := list("")
	if next != "" || len(all) != 3 {
		t.Fatalf("list: %+v, next %q", all, next)
	}
	for i, l := range all {
		if i > 0 && l.StartedAt.After(all[i-1].StartedAt) {
			t.Fatalf("list not newest first: %v", ids(all))
		}
		if l.SandboxID == nat.ID && (l.TemplateID != nat.Template || l.Metadata["run"] != "native") {
			t.Fatalf("native sandbox listed as %+v", l)
		}
	}
	if !slices.Contains(ids(all), nat.ID) {
		t.Fatalf("native sandbox %s not listed: %v", nat.ID, ids(all))
	}

	// Metadata filter, triple-encoded as the SDK sends it.
	inner := url.Values{url.PathEscape("owner"): {url.PathEscape("e2b test&co")}}.Encode()
	got, _ := list("?" + url.Values{"metadata": {inner}}.Encode())
	if !slices.Equal(ids(got), []string{a.SandboxID}) {
		t.Fatalf("metadata filter: %v", ids(got))
	}
	got, _ = list("?" + url.Values{"metadata": {"run=nobody"}}.Encode())
	if len(got) != 0 {
		t.Fatalf("metadata filter run=nobody: %v", ids(got))
	}

	// Paging with limit 1, both orders.
	for _, order := range []string{"desc", "asc"} {
		var paged []string
		token := ""
		for range 5 {
			q := url.Values{"limit": {"1"}, "order": {order}}
			if token != "" {
				q.Set("nextToken", token)
			}
			page, next := list("?" + q.Encode())
			if len(page) != 1 {
				t.Fatalf("%s page of %d", order, len(page))
			}
			paged = append(paged, page[0].SandboxID)
			if token = next; token == "" {
				break
			}
		}
		want := ids(all)
		if order == "asc" {
			slices.Reverse(want)
		}
		if !slices.Equal(paged, want) {
			t.Fatalf("%s paging: %v, want %v", order, paged, want)
		}
	}

	// Timeout.
	e.ok("POST", "/sandboxes/"+a.SandboxID+"/timeout", map[string]any{"timeout": 600}, 204, nil)
	sb, err := native.GetSandbox(ctx, idA)
	if err != nil || sb.TimeoutAt == nil || time.Until(*sb.TimeoutAt) < 500*time.Second {
		t.Fatalf("after timeout 600: %+v, %v", sb, err)
	}

	// Pause = suspend.
	e.ok("POST", "/sandboxes/"+a.SandboxID+"/pause", map[string]any{}, 204, nil)
	if sb, err := native.GetSandbox(ctx, idA); err != nil || sb.State != string(model.StateSuspended) {
		t.Fatalf("after pause: %+v, %v", sb, err)
	}
	e.fails("POST", "/sandboxes/"+a.SandboxID+"/pause", s.key, map[string]any{}, 409, "already paused")
	e.fails("POST", "/sandboxes/"+a.SandboxID+"/timeout", s.key, map[string]any{"timeout": 60}, 404, "paused")
	e.ok("GET", "/sandboxes/"+a.SandboxID, nil, 200, &detail)
	if detail.State != "paused" {
		t.Fatalf("paused sandbox is %q", detail.State)
	}
	if got, _ := list("?state=paused"); !slices.Equal(ids(got), []string{a.SandboxID}) {
		t.Fatalf("state=paused: %v", ids(got))
	}
	if got, _ := list("?state=running"); len(got) != 2 || slices.Contains(ids(got), a.SandboxID) {
		t.Fatalf("state=running: %v", ids(got))
	}
	var legacy []e2bListed
	e.ok("GET", "/sandboxes", nil, 200, &legacy)
	if len(legacy) != 2 || slices.Contains(ids(legacy), a.SandboxID) {
		t.Fatalf("legacy list (running only): %v", ids(legacy))
	}
	e.ok("GET", "/sandboxes?"+url.Values{"metadata": {"run=b"}}.Encode(), nil, 200, &legacy)
	if !slices.Equal(ids(legacy), []string{b.SandboxID}) {
		t.Fatalf("legacy list run=b: %v", ids(legacy))
	}

	// Connect wakes (201), then finds it running (200).
	var conn e2bSandbox
	e.ok("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 90}, 201, &conn)
	if conn.SandboxID != a.SandboxID || conn.TemplateID != "base" || conn.EnvdAccessToken == "" {
		t.Fatalf("connect: %+v", conn)
	}
	sb, err = native.GetSandbox(ctx, idA)
	if err != nil || sb.State != string(model.StateRunning) || sb.TimeoutAt == nil || time.Until(*sb.TimeoutAt) > 91*time.Second {
		t.Fatalf("after connect: %+v, %v", sb, err)
	}
	e.ok("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{}, 200, &conn)
	if sb2, err := native.GetSandbox(ctx, idA); err != nil || time.Until(*sb2.TimeoutAt) < 250*time.Second {
		t.Fatalf("connect with the default 300s did not extend the deadline: %+v, %v", sb2, err)
	}
	e.ok("POST", "/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 10}, 200, &conn)
	if sb3, err := native.GetSandbox(ctx, idA); err != nil || time.Until(*sb3.TimeoutAt) < 250*time.Second {
		t.Fatalf("connect with a shorter timeout shortened the deadline: %+v, %v", sb3, err)
	}

	// Legacy resume: 409 while running, 201 after a pause.
	e.fails("POST", "/sandboxes/"+b.SandboxID+"/resume", s.key, map[string]any{}, 409, "already running")
	e.ok("POST", "/sandboxes/"+b.SandboxID+"/pause", nil, 204, nil)
	e.ok("POST", "/sandboxes/"+b.SandboxID+"/resume", map[string]any{"timeout": 60, "autoPause": true}, 201, &conn)
	if sb, err := native.GetSandbox(ctx, idB); err != nil || sb.State != "running" || sb.OnTimeout != "suspend" {
		t.Fatalf("after resume: %+v, %v", sb, err)
	}
	e.ok("POST", "/sandboxes/"+b.SandboxID+"/refreshes", map[string]any{"duration": 3600}, 204, nil)
	if sb, err := native.GetSandbox(ctx, idB); err != nil || time.Until(*sb.TimeoutAt) < 3500*time.Second {
		t.Fatalf("after refresh: %+v, %v", sb, err)
	}
	// Metrics are sampled every 5 s (parity-control.mjs and
	// TestControlParity check the samples): a list, maybe still empty.
	var samples []map[string]any
	e.ok("GET", "/sandboxes/"+b.SandboxID+"/metrics", nil, 200, &samples)

	// A sandbox paused (frozen) natively is paused for E2B; connect
	// resumes it.
	idN := model.SandboxID(nat.ID)
	res, err := native.PauseSandbox(ctx, idN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := native.WaitOperation(ctx, model.OperationID(res.Operation.ID)); err != nil {
		t.Fatal(err)
	}
	e.ok("GET", "/sandboxes/"+nat.ID, nil, 200, &detail)
	if detail.State != "paused" || detail.TemplateID != nat.Template {
		t.Fatalf("natively paused sandbox: %+v", detail)
	}
	e.ok("POST", "/sandboxes/"+nat.ID+"/connect", map[string]any{"timeout": 60}, 201, &conn)
	if sb, err := native.GetSandbox(ctx, idN); err != nil || sb.State != "running" || sb.TimeoutAt == nil {
		t.Fatalf("after connect to the natively paused sandbox: %+v, %v", sb, err)
	}

	// Kill.
	for _, id := range []string{a.SandboxID, b.SandboxID, nat.ID} {
		e.ok("DELETE", "/sandboxes/"+id, nil, 204, nil)
		e.fails("DELETE", "/sandboxes/"+id, s.key, nil, 404, "not found")
		e.fails("GET", "/sandboxes/"+id, s.key, nil, 404, "not found")
	}
	if got, _ := list(""); len(got) != 0 {
		t.Fatalf("list after kill: %v", ids(got))
	}
	e.fails("DELETE", "/sandboxes/not-an-id", s.key, nil, 404, "not found")
}
