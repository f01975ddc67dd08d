package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/model"
)

// inProcessClient is an HTTP client over tr that follows no redirects.
func inProcessClient(tr http.RoundTripper) *http.Client {
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// inProcessDo sends a request through c (to any host: it never leaves the
// process) and returns its status, body and header.
func inProcessDo(t *testing.T, c *http.Client, method, path, key, body string, hdr http.Header) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://airlock.test"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b, res.Header
}

func wantAPICode(t *testing.T, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	var e apiv1.Error
	if status != wantStatus || json.Unmarshal(body, &e) != nil || e.Code != wantCode {
		t.Fatalf("%d %s, want %d %s", status, body, wantStatus, wantCode)
	}
}

// TestInProcessAsSandbox: a request AsSandbox carries acts as the
// sandbox's access token would, with no token: its own sandbox's routes
// open, everything else refused for its scope, rate-limited per sandbox.
func TestInProcessAsSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sbA := e.runningSandbox(e.keyA)
	sbA2 := e.runningSandbox(e.keyA)
	sbB := e.runningSandbox(e.keyB)
	c := inProcessClient(e.api.InProcess(e.api.Handler()).AsSandbox(e.projA, sbA))

	status, body, hdr := inProcessDo(t, c, "GET", "/v1/sandboxes/"+sbA.String(), "", "", nil)
	var got apiv1.Sandbox
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil || got.ID != sbA.String() {
		t.Fatalf("own sandbox: %d %s", status, body)
	}
	if hdr.Get("X-Request-Id") == "" || hdr.Get("Content-Type") != "application/json" || hdr.Get("Content-Length") == "" {
		t.Errorf("answer header %v: want the API's, with a length", hdr)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + sbA2.String(), ""},
		{"GET", "/v1/sandboxes/" + sbB.String(), ""},
		{"DELETE", "/v1/sandboxes/" + sbA.String(), ""},
		{"POST", "/v1/sandboxes/" + sbA.String() + "/suspend", ""},
		{"GET", "/v1/sandboxes", ""},
		{"POST", "/v1/sandboxes", "{}"},
		{"GET", "/v1/admin/projects", ""},
		{"GET", "/v1/operations/" + model.NewOperationID().String(), ""},
	} {
		status, body, _ := inProcessDo(t, c, tc.method, tc.path, "", tc.body, nil)
		wantAPICode(t, status, body, http.StatusForbidden, apiv1.CodeTokenScope)
	}
	// The caller it bears wins over any credential the request names.
	status, body, _ = inProcessDo(t, c, "GET", "/v1/sandboxes", e.admin, "", nil)
	wantAPICode(t, status, body, http.StatusForbidden, apiv1.CodeTokenScope)

	// The plain transport bears no caller: the request's own key counts.
	plain := inProcessClient(e.api.InProcess(e.api.Handler()))
	status, body, _ = inProcessDo(t, plain, "GET", "/v1/sandboxes/"+sbA.String(), "", "", nil)
	wantAPICode(t, status, body, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	if status, body, _ := inProcessDo(t, plain, "GET", "/v1/sandboxes", e.keyA, "", nil); status != http.StatusOK {
		t.Fatalf("plain in-process with a key: %d %s", status, body)
	}

	// No sandbox to act as: refused before anything runs.
	for _, tr := range []http.RoundTripper{
		e.api.InProcess(e.api.Handler()).AsSandbox(model.SystemProject, sbA),
		e.api.InProcess(e.api.Handler()).AsSandbox("", sbA),
		e.api.InProcess(e.api.Handler()).AsSandbox(e.projA, ""),
	} {
		req, _ := http.NewRequest("GET", "http://x/v1/sandboxes/"+sbA.String(), nil)
		if res, err := tr.RoundTrip(req); err == nil {
			res.Body.Close()
			t.Errorf("a transport for no sandbox answered %d", res.StatusCode)
		}
	}
}

// TestInProcessCannotBeForged is the attacker's side: nothing a request
// from outside carries makes it in-process. Headers naming the mark, the
// caller or a replica, and a client whose own context holds the very
// value the API reads, all get the normal authentication (401), over the
// network and through the in-process transport without AsSandbox alike.
func TestInProcessCannotBeForged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sbA := e.runningSandbox(e.keyA)
	path := "/v1/sandboxes/" + sbA.String()
	forged := http.Header{
		"Airlock-In-Process":       {"1"},
		"X-Airlock-In-Process":     {"true"},
		"Airlock-Principal":        {`{"project":"` + e.projA.String() + `","sandbox":"` + sbA.String() + `"}`},
		"X-Airlock-Sandbox":        {sbA.String()},
		"X-Airlock-Project":        {e.projA.String()},
		"E2b-Sandbox-Id":           {sbA.String()},
		"E2b-Sandbox-Port":         {"49983"},
		"X-Forwarded-For":          {"127.0.0.1"},
		"X-Real-Ip":                {"127.0.0.1"},
		"Forwarded":                {"for=127.0.0.1;host=localhost"},
		"X-Access-Token":           {"als_forged"},
		"E2b-Traffic-Access-Token": {"als_forged"},
	}
	// The value authenticate reads, in the caller's own context.
	poisoned := context.WithValue(context.Background(), inProcessKey{}, &inProcessCall{p: &principal{project: e.projA, role: model.RoleAdmin, sandbox: sbA}})
	send := func(c *http.Client, base string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(poisoned, "GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range forged {
			req.Header[k] = v
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	before := e.dump()
	status, body := send(e.srv.Client(), e.srv.URL)
	wantAPICode(t, status, body, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	status, body = send(inProcessClient(e.api.InProcess(e.api.Handler())), "http://airlock.test")
	wantAPICode(t, status, body, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// Claiming to be a replica is checked as ever.
	forged.Set("Airlock-Forwarded-By", string(testNode))
	status, body = send(e.srv.Client(), e.srv.URL)
	wantAPICode(t, status, body, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store")
	}
	// The server's handler never sees a mark it did not make: a handler
	// behind the real listener finds none, whatever the client's context.
	var marked atomic.Bool
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		marked.Store(inProcessFrom(r.Context()) != nil)
	}))
	defer probe.Close()
	if status, _ := send(probe.Client(), probe.URL); status != http.StatusOK || marked.Load() {
		t.Fatalf("a request over the network arrived marked in-process (%d)", status)
	}
}

// TestInProcessPorts: the port proxy behind the in-process transport, as
// the E2B gateway uses it: the guest gets the X-Forwarded-* the gateway
// set (it is not a client), no credential, and upgrades and streams pass.
func TestInProcessPorts(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t)
	tr := pe.api.InProcess(pe.api.Handler()).AsSandbox(pe.projA, pe.id)
	status, body, _ := inProcessDo(t, inProcessClient(tr), "POST", portPath(pe.id, pe.guest.port, "run?x=1"), "", `{"k":1}`, http.Header{
		"X-Forwarded-For":     {"198.51.100.7"},
		"X-Forwarded-Host":    {"3000-" + pe.id.String() + ".sbx.test"},
		"X-Forwarded-Proto":   {"https"},
		"Airlock-Whatever":    {"dropped"},
		apiv1.HeaderGuestHost: {"custom-host.example.com:3000"},
	})
	var saw guestSaw
	if status != http.StatusOK || json.Unmarshal(body, &saw) != nil {
		t.Fatalf("%d %s", status, body)
	}
	if saw.Path != "/run" || saw.Query != "x=1" || saw.Body != `{"k":1}` ||
		saw.Header.Get("X-Forwarded-For") != "198.51.100.7" || saw.Header.Get("X-Forwarded-Host") != "3000-"+pe.id.String()+".sbx.test" ||
		saw.Header.Get("X-Forwarded-Proto") != "https" || saw.Header.Get("Authorization") != "" || saw.Header.Get("Airlock-Whatever") != "" ||
		saw.Host != "custom-host.example.com:3000" || saw.Header.Get(apiv1.HeaderGuestHost) != "" {
		t.Fatalf("guest saw %+v", saw)
	}
	// In-process without a caller of the server's (a key of its own), or
	// from a client over the network, the same headers are replaced.
	status, body, _ = inProcessDo(t, inProcessClient(pe.api.InProcess(pe.api.Handler())), "GET", portPath(pe.id, pe.guest.port, "x"), pe.keyA, "",
		http.Header{"X-Forwarded-Host": {"evil.example"}, "X-Forwarded-For": {"192.0.2.66"}, apiv1.HeaderGuestHost: {"evil.example"}})
	if status != http.StatusOK || json.Unmarshal(body, &saw) != nil || saw.Header.Get("X-Forwarded-Host") == "evil.example" || saw.Header.Get("X-Forwarded-For") == "192.0.2.66" ||
		saw.Host == "evil.example" {
		t.Fatalf("in-process with a key: %d, the guest saw %v", status, saw.Header)
	}
	res := pe.send(req{method: "GET", path: portPath(pe.id, pe.guest.port, "x"), key: pe.keyA, t: t,
		header: http.Header{"X-Forwarded-Host": {"evil.example"}, "X-Forwarded-For": {"192.0.2.66"}, apiv1.HeaderGuestHost: {"evil.example"}}}).want(t, http.StatusOK)
	if err := json.Unmarshal(res.body, &saw); err != nil || saw.Header.Get("X-Forwarded-Host") == "evil.example" || saw.Header.Get("X-Forwarded-For") != "127.0.0.1" ||
		saw.Host == "evil.example" {
		t.Fatalf("a client's own X-Forwarded-* reached the guest: %+v", saw.Header)
	}

	// A reverse proxy in front, as the gateway's: upgrades (hijacked
	// connections) and streams cross the in-process transport.
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "airlock.test"})
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: -1,
	})
	defer front.Close()
	upgrade(t, front.URL, portPath(pe.id, pe.guest.port, "upgrade"), "")
	streamThrough(t, front.URL+portPath(pe.id, pe.guest.port, "stream"), "", pe.guest)
}

// TestInProcessForwarded: an in-process request for a sandbox another
// node hosts goes there with the sandbox's access token, which the node
// authenticates; the guest still sees the gateway's X-Forwarded-Host.
func TestInProcessForwarded(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	c := newCluster(t, func(cfg *Config) { cfg.Egress = reg })
	id := model.SandboxID(c.sandbox)
	reg.Add(id, netip.MustParseAddr("127.0.0.1"), nil)
	g := newFakeGuest(t)
	a := c.a.api
	mux := http.NewServeMux()
	mux.Handle("/", a.Handler())
	hc := inProcessClient(a.InProcess(mux).AsSandbox(c.projA, id))

	status, body, _ := inProcessDo(t, hc, "GET", "/v1/sandboxes/"+c.sandbox+"/processes", "", "", nil)
	if status != http.StatusOK {
		t.Fatalf("processes through the replica: %d %s", status, body)
	}
	req, err := http.NewRequest("GET", "http://airlock.test"+portPath(id, g.port, "x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "3000-" + c.sandbox + ".sbx.test"
	req.Header.Set("X-Forwarded-Host", req.Host)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var saw guestSaw
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &saw) != nil {
		t.Fatalf("port through the replica: %d %s", res.StatusCode, b)
	}
	if saw.Header.Get("X-Forwarded-Host") != req.Host || saw.Header.Get("Authorization") != "" {
		t.Fatalf("guest saw %v", saw.Header)
	}
}

// TestInProcessTransport: what the transport does as an HTTP connection
// would: streaming, lengths, HEAD, hijacks, panics, the caller going
// away, read deadlines.
func TestInProcessTransport(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	serve := func(h http.HandlerFunc) *http.Client {
		return inProcessClient(e.api.InProcess(h))
	}
	get := func(c *http.Client, method string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://airlock.test/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Run("streams", func(t *testing.T) {
		release := make(chan struct{})
		c := serve(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "data: second\n\n")
		})
		res := get(c, "GET")
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" || res.ContentLength != -1 {
			t.Fatalf("first event %q, %v (length %d)", line, err, res.ContentLength)
		}
		close(release)
		if rest, err := io.ReadAll(br); err != nil || string(rest) != "\ndata: second\n\n" {
			t.Fatalf("rest %q, %v", rest, err)
		}
	})

	t.Run("large body streams with backpressure", func(t *testing.T) {
		const size = 8 << 20
		c := serve(func(w http.ResponseWriter, r *http.Request) {
			chunk := make([]byte, 32<<10)
			for n := 0; n < size; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		})
		res := get(c, "GET")
		defer res.Body.Close()
		n, err := io.Copy(io.Discard, res.Body)
		if err != nil || n != size {
			t.Fatalf("read %d, %v", n, err)
		}
	})

	t.Run("length, sniffing and HEAD", func(t *testing.T) {
		c := serve(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html>hi</html>")
		})
		res := get(c, "GET")
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "<html>hi</html>" || res.ContentLength != 15 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%q length %d type %q", b, res.ContentLength, res.Header.Get("Content-Type"))
		}
		res = get(c, "HEAD")
		b, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if len(b) != 0 || res.StatusCode != http.StatusOK {
			t.Fatalf("HEAD: %d %q", res.StatusCode, b)
		}
		c = serve(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		res = get(c, "GET")
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent || res.ContentLength != 0 {
			t.Fatalf("204: %d length %d", res.StatusCode, res.ContentLength)
		}
	})

	t.Run("the caller closing ends the handler", func(t *testing.T) {
		ended := make(chan error, 1)
		c := serve(func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			for {
				if _, err := io.WriteString(w, strings.Repeat("x", 4096)); err != nil {
					<-r.Context().Done()
					ended <- err
					return
				}
			}
		})
		res := get(c, "GET")
		_, _ = io.ReadFull(res.Body, make([]byte, 10))
		res.Body.Close()
		select {
		case err := <-ended:
			if !errors.Is(err, errInProcessClosed) {
				t.Fatalf("write error %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not see its caller go")
		}
	})

	t.Run("the caller's context ending ends the handler", func(t *testing.T) {
		started, ended := make(chan struct{}), make(chan struct{})
		c := serve(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			close(ended)
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://airlock.test/", nil)
		if res, err := c.Do(req); err == nil {
			res.Body.Close()
			t.Fatal("a canceled round trip answered")
		}
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context did not end")
		}
	})

	t.Run("panics", func(t *testing.T) {
		c := serve(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
		req, _ := http.NewRequest("GET", "http://airlock.test/", nil)
		if res, err := c.Do(req); err == nil {
			res.Body.Close()
			t.Fatal("a panicking handler answered")
		}
		c = serve(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		res := get(c, "GET")
		_, err := io.ReadAll(res.Body)
		res.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("body of an aborted answer: %v", err)
		}
	})

	t.Run("the body read deadline holds", func(t *testing.T) {
		// withBodyDeadline, as the API wraps every handler.
		timed := newEnv(t, func(c *envConfig) { c.BodyReadTimeout = 200 * time.Millisecond })
		got := make(chan error, 1)
		h := timed.api.withBodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			got <- err
		}))
		pr, pw := io.Pipe()
		defer pw.Close()
		c := inProcessClient(timed.api.InProcess(h))
		req, _ := http.NewRequest("POST", "http://airlock.test/", pr)
		go func() {
			if res, err := c.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		_, _ = pw.Write([]byte("{"))
		select {
		case err := <-got:
			if !errors.Is(err, errBodyTimeout) {
				t.Fatalf("a stalled body read: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stalled body was never timed out")
		}
	})
}
