package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// withEgress gives the API a real egress registry.
func withEgress(reg *egress.Registry) envOption {
	return func(c *envConfig) { c.Egress = reg }
}

func withSecrets(t *testing.T) envOption {
	return func(c *envConfig) {
		s, err := secrets.OpenKey(filepath.Join(t.TempDir(), secrets.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		c.Secrets = s
	}
}

// register makes a sandbox live in reg with its stored policy, as the
// server does when the sandbox starts.
func (e *testEnv) register(reg *egress.Registry, id string, guest string) *egress.Sandbox {
	e.t.Helper()
	ctx := context.Background()
	spec, err := e.st.GetSandboxEgressByID(ctx, model.SandboxID(id))
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := store.CompileEgress(ctx, e.st, spec, policy.Public)
	if err != nil {
		e.t.Fatal(err)
	}
	return reg.Add(model.SandboxID(id), netip.MustParseAddr(guest), p)
}

func TestEgressPolicyCreateGetPut(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	e := newEnv(t, withEgress(reg))
	e.do("PUT", "/v1/egress-profiles/pypi", e.admin, `{"allow": ["pypi.org", "files.pythonhosted.org:443"]}`).want(t, http.StatusCreated)

	// Refused creates write nothing.
	before := e.dump()
	for _, tc := range []struct{ body, code string }{
		{`{"egress": {"allow": ["not a host"]}}`, apiv1.CodeInvalidRequest},
		{`{"egress": {"allow": ["example.com:99999"]}}`, apiv1.CodeInvalidRequest},
		{`{"egress": {"default": "sometimes"}}`, apiv1.CodeInvalidRequest},
		{`{"egress": {"allow": ["a.example"], "extra": 1}}`, apiv1.CodeInvalidRequest},
		{`{"egress": {"tls_exempt": ["bank.example:443"]}}`, apiv1.CodeInvalidRequest},
		{`{"egress": {"profiles": ["nope"]}}`, apiv1.CodeUnknownEgressProfile},
	} {
		e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: tc.body, invalid: tc.code == apiv1.CodeInvalidRequest && strings.Contains(tc.body, "extra") || strings.Contains(tc.body, "sometimes")}).
			wantError(t, http.StatusBadRequest, tc.code)
	}
	if after := e.dump(); after != before {
		t.Fatal("a refused create changed the store")
	}

	created := e.createSandbox(e.keyA, `{"egress": {"default": "none", "allow": ["*.github.com", "203.0.113.0/24:22"], "deny": ["evil.github.com"], "profiles": ["pypi"]}}`)
	if created.Sandbox.Egress == nil || created.Sandbox.Egress.Default != "none" || len(created.Sandbox.Egress.Allow) != 2 {
		t.Fatalf("create shows egress %+v", created.Sandbox.Egress)
	}
	id := created.Sandbox.ID
	var sb apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+id, e.keyA, "").want(t, http.StatusOK).decode(t, &sb)
	if sb.Egress == nil || sb.Egress.Profiles[0] != "pypi" {
		t.Fatalf("GET shows egress %+v", sb.Egress)
	}
	var got apiv1.SandboxEgress
	e.do("GET", "/v1/sandboxes/"+id+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.Live || len(got.Effective.Allow) != 4 || got.Effective.Default != "none" || len(got.Policy.Allow) != 2 {
		t.Fatalf("egress = %+v", got)
	}
	// A sandbox created without a policy has the server's default.
	plain := e.createSandbox(e.keyA, `{}`)
	var def apiv1.SandboxEgress
	e.do("GET", "/v1/sandboxes/"+plain.Sandbox.ID+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &def)
	if def.Effective.Default != "public" || len(def.Policy.Allow) != 0 || len(def.Effective.Allow) != 0 {
		t.Fatalf("default egress = %+v", def)
	}

	// Another project's key sees nothing.
	e.do("GET", "/v1/sandboxes/"+id+"/egress", e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyB, `{"allow": ["x.example"]}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("POST", "/v1/sandboxes/"+id+"/egress/explain", e.keyB, `{"host": "x.example", "port": 443}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("GET", "/v1/sandboxes/"+id+"/egress/decisions", e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)

	// Live: PUT applies at once and cuts open connections now denied.
	live := e.register(reg, id, "10.213.0.2")
	var closed atomic.Int32
	release, err := live.Track(egress.Conn{Host: "api.github.com", Addr: netip.MustParseAddr("203.0.113.10"), Port: 443,
		Close: func() error { closed.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyA, `{"allow": ["pypi.org"], "profiles": ["nope"]}`).
		wantError(t, http.StatusBadRequest, apiv1.CodeUnknownEgressProfile)
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyA, `{"allow": ["bad host!"]}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	if closed.Load() != 0 {
		t.Fatal("a refused PUT cut a connection")
	}
	got = apiv1.SandboxEgress{}
	e.do("PUT", "/v1/sandboxes/"+id+"/egress", e.keyA, `{"default": "none", "allow": ["pypi.org"]}`).want(t, http.StatusOK).decode(t, &got)
	if !got.Live || len(got.Policy.Allow) != 1 {
		t.Fatalf("PUT answered %+v", got)
	}
	if closed.Load() != 1 {
		t.Fatalf("the connection to a now denied destination was closed %d times, want 1", closed.Load())
	}
	if d := live.Explain("api.github.com", netip.Addr{}, 443); d.Allowed {
		t.Fatalf("the live sandbox still allows api.github.com: %+v", d)
	}
	events, _ := live.Log.Since(0)
	if len(events) == 0 || events[len(events)-1].Kind != decisionlog.KindCut {
		t.Fatalf("no cut decision logged: %+v", events)
	}
	e.do("GET", "/v1/sandboxes/"+id+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if !got.Live || got.Policy.Default != "none" {
		t.Fatalf("GET after PUT = %+v", got)
	}
}

func TestEgressProfilesAdminOnlyAndInUse(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	e := newEnv(t, withEgress(reg))
	e.do("PUT", "/v1/egress-profiles/corp", e.keyA, `{"allow": ["a.example"]}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("DELETE", "/v1/egress-profiles/corp", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.send(req{method: "PUT", path: "/v1/egress-profiles/corp", key: e.admin, body: `{"default": "none"}`, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("PUT", "/v1/egress-profiles/corp", e.admin, `{"allow": ["*.bad*"]}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.send(req{method: "PUT", path: "/v1/egress-profiles/Bad_Name", key: e.admin, body: `{}`, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	var p apiv1.EgressProfile
	e.do("PUT", "/v1/egress-profiles/corp", e.admin, `{"allow": ["a.example"]}`).want(t, http.StatusCreated).decode(t, &p)
	e.do("PUT", "/v1/egress-profiles/corp", e.admin, `{"allow": ["a.example", "b.example:443"]}`).want(t, http.StatusOK).decode(t, &p)
	if len(p.Allow) != 2 || !p.UpdatedAt.After(p.CreatedAt) {
		t.Fatalf("replaced profile %+v", p)
	}
	// Any key reads profiles.
	var list apiv1.EgressProfileList
	e.do("GET", "/v1/egress-profiles", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Profiles) != 1 || list.Profiles[0].Name != "corp" {
		t.Fatalf("list %+v", list)
	}
	e.do("GET", "/v1/egress-profiles/corp", e.keyB, "").want(t, http.StatusOK).decode(t, &p)
	e.do("GET", "/v1/egress-profiles/none", e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)

	sb := e.createSandbox(e.keyA, `{"egress": {"default": "none", "profiles": ["corp"]}}`)
	e.do("DELETE", "/v1/egress-profiles/corp", e.admin, "").wantError(t, http.StatusConflict, apiv1.CodeEgressProfileInUse)

	// A profile change reaches the live sandbox.
	live := e.register(reg, sb.Sandbox.ID, "10.213.0.6")
	if d := live.Explain("c.example", netip.Addr{}, 443); d.Allowed {
		t.Fatalf("c.example allowed before the profile names it: %+v", d)
	}
	e.do("PUT", "/v1/egress-profiles/corp", e.admin, `{"allow": ["c.example"]}`).want(t, http.StatusOK)
	if d := live.Explain("c.example", netip.Addr{}, 443); !d.Allowed {
		t.Fatalf("the profile change did not reach the live sandbox: %+v", d)
	}

	e.do("PUT", "/v1/sandboxes/"+sb.Sandbox.ID+"/egress", e.keyA, `{"default": "none"}`).want(t, http.StatusOK)
	e.do("DELETE", "/v1/egress-profiles/corp", e.admin, "").want(t, http.StatusOK).decode(t, &p)
	e.do("DELETE", "/v1/egress-profiles/corp", e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
}

func TestEgressExplain(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	e := newEnv(t, withEgress(reg))
	sb := e.createSandbox(e.keyA, `{"egress": {"default": "none", "allow": ["pypi.org:443", "203.0.113.0/24:22"], "deny": ["bad.pypi.org"]}}`)
	path := "/v1/sandboxes/" + sb.Sandbox.ID + "/egress/explain"
	check := func(body string, allowed bool, rule, reasonPart string) {
		t.Helper()
		var out apiv1.ExplainEgressResponse
		e.do("POST", path, e.keyA, body).want(t, http.StatusOK).decode(t, &out)
		if out.Allowed != allowed || !strings.Contains(out.Rule, rule) || !strings.Contains(out.Reason, reasonPart) {
			t.Fatalf("%s → %+v, want allowed=%v rule %q reason containing %q", body, out, allowed, rule, reasonPart)
		}
	}
	for _, live := range []bool{false, true} {
		if live {
			e.register(reg, sb.Sandbox.ID, "10.213.0.10")
		}
		check(`{"host": "pypi.org", "port": 443}`, true, "pypi.org:443", "DNS binding")
		check(`{"host": "PyPI.org.", "port": 443}`, true, "pypi.org:443", "")
		check(`{"host": "pypi.org", "port": 80}`, false, "", "")
		check(`{"host": "example.com", "port": 443}`, false, "", "")
		check(`{"host": "203.0.113.9", "port": 22}`, true, "203.0.113.0/24:22", "")
		check(`{"host": "169.254.169.254", "port": 80}`, false, "", "")
	}
	e.do("POST", path, e.keyA, `{"host": "not a host", "port": 443}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.send(req{method: "POST", path: path, key: e.keyA, body: `{"port": 443}`, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}

func TestEgressDecisions(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{LogCapacity: 4})
	e := newEnv(t, withEgress(reg))
	sb := e.createSandbox(e.keyA, `{"egress": {"allow": ["pypi.org"]}}`)
	path := "/v1/sandboxes/" + sb.Sandbox.ID + "/egress/decisions"
	var list apiv1.EgressDecisionList
	e.do("GET", path, e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if list.Live || len(list.Decisions) != 0 {
		t.Fatalf("decisions of a sandbox not live: %+v", list)
	}
	live := e.register(reg, sb.Sandbox.ID, "10.213.0.14")
	live.Decide(decisionlog.KindDNS, "pypi.org", netip.Addr{}, 0)
	live.Decide(decisionlog.KindHTTP, "evil.example", netip.MustParseAddr("203.0.113.5"), 80)
	e.do("GET", path, e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if !list.Live || len(list.Decisions) != 2 || !list.Decisions[0].Allowed || list.Decisions[1].Host != "evil.example" || list.Dropped != 0 {
		t.Fatalf("decisions %+v", list)
	}
	// Sequence numbers start above the log's creation time (a log made
	// again after a restart numbers above the old one); below, base+N is the
	// log's N-th event.
	base := list.Decisions[0].Seq - 1
	seq := func(n uint64) string { return strconv.FormatUint(base+n, 10) }
	e.do("GET", path+"?after="+seq(1), e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Decisions) != 1 || list.Decisions[0].Seq != base+2 {
		t.Fatalf("after=1: %+v", list)
	}
	e.send(req{method: "GET", path: path + "?after=x", key: e.keyA, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("GET", path+"?since=1", e.keyA, "").wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	// Overflow: the log holds 4; asking from 0 reports what was dropped.
	for i := range 4 {
		live.Decide(decisionlog.KindDNS, fmt.Sprintf("n%d.example", i), netip.Addr{}, 0)
	}
	e.do("GET", path, e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if list.Dropped != 2 || len(list.Decisions) != 4 || list.Decisions[0].Seq != base+3 {
		t.Fatalf("after overflow: dropped %d, %d decisions from %d", list.Dropped, len(list.Decisions), list.Decisions[0].Seq)
	}

	// Follow: resume after seq 4 with Last-Event-ID, then see a new one live.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"?follow=true&after="+seq(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+e.keyA)
	hr.Header.Set("Last-Event-ID", seq(4))
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("follow: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(res.Body)
	next := func() (id, event, data string) {
		t.Helper()
		for lines.Scan() {
			l := lines.Text()
			switch {
			case l == "":
				if event != "" {
					return
				}
			case strings.HasPrefix(l, "id: "):
				id = l[4:]
			case strings.HasPrefix(l, "event: "):
				event = l[7:]
			case strings.HasPrefix(l, "data: "):
				data = l[6:]
			}
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return
	}
	for _, want := range []string{seq(5), seq(6)} {
		if id, ev, _ := next(); id != want || ev != apiv1.EventEgressDecision {
			t.Fatalf("event %s %s, want decision %s", ev, id, want)
		}
	}
	live.Decide(decisionlog.KindConnect, "", netip.MustParseAddr("198.51.100.1"), 22)
	id, ev, data := next()
	if id != seq(7) || ev != apiv1.EventEgressDecision || !strings.Contains(data, `"198.51.100.1"`) {
		t.Fatalf("live event %s %s %s", id, ev, data)
	}
	// A follower that fell behind learns how many it missed.
	hr2, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"?follow=true&after=0", nil)
	hr2.Header.Set("Authorization", "Bearer "+e.keyA)
	res2, err := e.srv.Client().Do(hr2)
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	lines = bufio.NewScanner(res2.Body)
	if _, ev, data := next(); ev != apiv1.EventEgressDropped || data != `{"dropped":3}` {
		t.Fatalf("first event %s %s, want dropped 3", ev, data)
	}
	if id, _, _ := next(); id != seq(4) {
		t.Fatalf("after the drop, id %s, want base+4", id)
	}
	// A resume point beyond the log (its sandbox's network was set up
	// again, and the log began anew) starts at the log's beginning.
	hr3, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"?follow=true&after="+seq(100), nil)
	hr3.Header.Set("Authorization", "Bearer "+e.keyA)
	res3, err := e.srv.Client().Do(hr3)
	if err != nil {
		t.Fatal(err)
	}
	defer res3.Body.Close()
	lines = bufio.NewScanner(res3.Body)
	if _, ev, _ := next(); ev != apiv1.EventEgressDropped {
		t.Fatalf("first event %s, want dropped", ev)
	}
	if id, _, _ := next(); id != seq(4) {
		t.Fatalf("id %s, want base+4", id)
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	const value = "ghp_S3cretValueNeverShown"
	e := newEnv(t, withSecrets(t))
	path := "/v1/secrets/gh-token"
	body := fmt.Sprintf(`{"value": %q, "hosts": ["api.github.com", "raw.githubusercontent.com"]}`, value)
	var s apiv1.Secret
	r := e.send(req{method: "PUT", path: path, key: e.keyA, body: body, header: http.Header{"Idempotency-Key": {"put-secret-1"}}}).want(t, http.StatusCreated)
	r.decode(t, &s)
	if s.Name != "gh-token" || s.Header != "Authorization" || s.Format != "Bearer {value}" || s.Placeholder != "airlock-secret-gh-token" || len(s.Hosts) != 2 {
		t.Fatalf("secret %+v", s)
	}
	bodies := []string{string(r.body)}
	// Replayed with its key: same answer.
	r = e.send(req{method: "PUT", path: path, key: e.keyA, body: body, header: http.Header{"Idempotency-Key": {"put-secret-1"}}}).want(t, http.StatusCreated)
	bodies = append(bodies, string(r.body))
	r = e.do("PUT", path, e.keyA, fmt.Sprintf(`{"value": %q, "hosts": ["api.example.com"], "header": "X-Api-Key"}`, value+"2")).want(t, http.StatusOK)
	r.decode(t, &s)
	if s.Header != "X-Api-Key" || s.Format != "{value}" {
		t.Fatalf("replaced secret %+v", s)
	}
	bodies = append(bodies, string(r.body))
	bodies = append(bodies, string(e.do("GET", "/v1/secrets", e.keyA, "").want(t, http.StatusOK).body))
	bodies = append(bodies, string(e.do("GET", path, e.keyA, "").want(t, http.StatusOK).body))
	for _, b := range bodies {
		if strings.Contains(b, value) || strings.Contains(b, "S3cret") {
			t.Fatalf("a response holds the value: %s", b)
		}
	}
	// Sealed at rest: no row of any table holds it, or its plain hash.
	sum := sha256.Sum256([]byte(value))
	dump := e.dump()
	for _, leak := range []string{value, "S3cret", hex.EncodeToString(sum[:]), fmt.Sprint(sum[:])} {
		if strings.Contains(dump, leak) {
			t.Fatalf("the database holds %q", leak)
		}
	}
	var sealed []byte
	if err := e.st.DB().QueryRow(`SELECT sealed FROM secrets WHERE name = 'gh-token'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if len(sealed) == 0 || strings.Contains(string(sealed), "S3cret") {
		t.Fatalf("sealed column %x", sealed)
	}

	// Bad input.
	for _, b := range []string{
		`{"value": "", "hosts": ["a.example"]}`,
		`{"value": "v", "hosts": ["203.0.113.1"]}`,
		`{"value": "v", "hosts": ["a.example"], "header": "Host"}`,
		`{"value": "v", "hosts": ["a.example"], "format": "no marker"}`,
		`{"value": "a\nb", "hosts": ["a.example"]}`,
		// Public suffixes, and wildcards over them: names anyone may
		// register, which would get the secret.
		`{"value": "v", "hosts": ["*.com"]}`,
		`{"value": "v", "hosts": ["a.example", "com"]}`,
		`{"value": "v", "hosts": ["*.co.uk"]}`,
		`{"value": "v", "hosts": ["*.github.io"]}`,
		`{"value": "v", "hosts": ["*.githubusercontent.com"]}`,
	} {
		e.send(req{method: "PUT", path: "/v1/secrets/other", key: e.keyA, body: b, invalid: strings.Contains(b, `"value": ""`)}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	e.send(req{method: "PUT", path: "/v1/secrets/bad.name", key: e.keyA, body: body, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	// Project-scoped.
	var list apiv1.SecretList
	e.do("GET", "/v1/secrets", e.keyB, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Secrets) != 0 {
		t.Fatalf("another project lists %+v", list)
	}
	e.do("GET", path, e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("DELETE", path, e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("DELETE", path, e.keyA, "").want(t, http.StatusOK)
	e.do("GET", path, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
}

func TestSecretsNeedAKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("PUT", "/v1/secrets/tok", e.keyA, `{"value": "v", "hosts": ["a.example"]}`).wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
}

func TestEgressPutDeletedSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{"egress": {"allow": ["a.example"]}}`)
	e.do("DELETE", "/v1/sandboxes/"+sb.Sandbox.ID, e.keyA, "").want(t, http.StatusAccepted)
	if err := e.st.TransitionSandbox(context.Background(), model.SandboxID(sb.Sandbox.ID), model.StateDeleting, model.StateDeleted, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.do("PUT", "/v1/sandboxes/"+sb.Sandbox.ID+"/egress", e.keyA, `{}`).wantError(t, http.StatusConflict, apiv1.CodeInvalidTransition)
	var got apiv1.SandboxEgress
	e.do("GET", "/v1/sandboxes/"+sb.Sandbox.ID+"/egress", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if len(got.Policy.Allow) != 1 {
		t.Fatalf("a deleted sandbox's policy changed: %+v", got)
	}
}

func TestEgressMutationsRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withSecrets(t), func(c *envConfig) { c.MutationRate, c.MutationBurst = 0.001, 5 }) // the setup's admin key makes 4
	for i := range 5 {
		e.do("PUT", fmt.Sprintf("/v1/secrets/s%d", i), e.keyA, `{"value": "v", "hosts": ["a.example"]}`).want(t, http.StatusCreated)
	}
	for _, r := range []struct{ method, path, body string }{
		{"PUT", "/v1/secrets/b", `{"value": "v", "hosts": ["a.example"]}`},
		{"DELETE", "/v1/secrets/s0", ""},
		{"PUT", "/v1/sandboxes/" + model.NewSandboxID().String() + "/egress", `{}`},
	} {
		e.do(r.method, r.path, e.keyA, r.body).wantError(t, http.StatusTooManyRequests, apiv1.CodeRateLimited)
	}
	// Reads are not limited.
	e.do("GET", "/v1/secrets", e.keyA, "").want(t, http.StatusOK)
}

// TestEgressDecisionsEndWithTheSandbox: a follower's stream ends with an
// end event once the sandbox leaves the registry and is deleted.
func TestEgressDecisionsEndWithTheSandbox(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	e := newEnv(t, withEgress(reg))
	sb := e.createSandbox(e.keyA, `{}`)
	id := model.SandboxID(sb.Sandbox.ID)
	live := e.register(reg, sb.Sandbox.ID, "10.213.0.18")
	live.Decide(decisionlog.KindDNS, "a.example", netip.Addr{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/sandboxes/"+sb.Sandbox.ID+"/egress/decisions?follow=true", nil)
	hr.Header.Set("Authorization", "Bearer "+e.keyA)
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "id: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	e.do("DELETE", "/v1/sandboxes/"+sb.Sandbox.ID, e.keyA, "").want(t, http.StatusAccepted)
	if err := e.st.TransitionSandbox(ctx, id, model.StateDeleting, model.StateDeleted, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	reg.Remove(id)
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(rest), "event: end\ndata: {}\n\n") {
		t.Fatalf("stream ended with %q", rest)
	}
}
