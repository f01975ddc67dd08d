package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/model"
)

// guestSaw is what the fake guest server got.
type guestSaw struct {
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	RawPath string      `json:"raw_path"`
	Query   string      `json:"query"`
	Host    string      `json:"host"`
	Header  http.Header `json:"header"`
	Body    string      `json:"body"`
}

// fakeGuest is a server "in a sandbox": on 127.0.0.1, which the test
// registers as the sandbox's guest address.
type fakeGuest struct {
	port    int
	release chan struct{} // /stream's second chunk waits for it
}

func newFakeGuest(t *testing.T) *fakeGuest {
	t.Helper()
	g := &fakeGuest{release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "echo") {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw) // echo until the caller closes
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		// An attacker's guest plants its own key as the console's session.
		for _, c := range guestSetCookies {
			w.Header().Add("Set-Cookie", c)
		}
		_, _ = io.WriteString(w, "planted")
	})
	mux.HandleFunc("/teapot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Guest", "yes")
		w.Header().Set("X-Request-Id", "guest-own")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(guestSaw{
			Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Host: r.Host, Header: r.Header, Body: string(b),
		})
	})
	srv := httptest.NewUnstartedServer(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	g.port = ln.Addr().(*net.TCPAddr).Port
	return g
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func portPath(id model.SandboxID, port int, rest string) string {
	return fmt.Sprintf("/v1/sandboxes/%s/ports/%d/%s", id, port, rest)
}

// portEnv is an API with an egress registry and a running sandbox of
// project A whose guest address is loopback, where a fake guest listens.
type portEnv struct {
	*testEnv
	reg   *egress.Registry
	id    model.SandboxID
	guest *fakeGuest
	rec   *holdRecorder
}

func newPortEnv(t *testing.T, opts ...envOption) *portEnv {
	t.Helper()
	pe := &portEnv{reg: egress.NewRegistry(egress.RegistryConfig{}), rec: &holdRecorder{}}
	opts = append([]envOption{withEgress(pe.reg), func(c *envConfig) { c.Activity = pe.rec }}, opts...)
	pe.testEnv = newEnv(t, opts...)
	pe.id = pe.runningSandbox(pe.keyA)
	pe.reg.Add(pe.id, netip.MustParseAddr("127.0.0.1"), nil)
	pe.guest = newFakeGuest(t)
	return pe
}

// holdRecorder records touches and holds.
type holdRecorder struct {
	mu      sync.Mutex
	touched int
	held    int // open now
	holds   int // ever
}

func (r *holdRecorder) Touch(model.SandboxID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touched++
}

func (r *holdRecorder) Hold(model.SandboxID) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held++
	r.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.held--
		})
	}
}

func (r *holdRecorder) state() (touched, held, holds int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.touched, r.held, r.holds
}

// rawDo sends a request the OpenAPI validator cannot route (a path of
// several segments, an empty one) straight to the server.
func (e *testEnv) rawDo(t *testing.T, method, path, key string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	r, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		r.Header[k] = v
	}
	res, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// TestPortsProxyRequests: every method reaches the guest with its path,
// query and body; the caller's credentials and Airlock's headers do not;
// the guest's answer comes back as it is.
func TestPortsProxyRequests(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t)
	srvHost := strings.TrimPrefix(pe.srv.URL, "http://")
	guestHost := "127.0.0.1:" + strconv.Itoa(pe.guest.port)
	hdr := http.Header{
		"X-Custom":         {"kept"},
		"Cookie":           {"a=b; airlock_session=alk_the_console_session"}, // the console's is dropped
		"Airlock-Whatever": {"dropped"},
		"X-Forwarded-Host": {"evil.example"}, // a client's own is replaced
		"X-Forwarded-For":  {"192.0.2.66"},
	}
	for _, tc := range []struct {
		method, rest, body string
		wantPath, wantQ    string
	}{
		{"GET", "echo?x=1&y=a%2Fb", "", "/echo", "x=1&y=a%2Fb"},
		{"POST", "run", `{"code": "print(1)"}`, "/run", ""},
		{"PUT", "put", `{"k": 1}`, "/put", ""},
		{"PATCH", "patch", `{"k": 2}`, "/patch", ""},
		{"DELETE", "del", "", "/del", ""},
		{"OPTIONS", "opt", "", "/opt", ""},
	} {
		t.Run(tc.method, func(t *testing.T) {
			res := pe.send(req{method: tc.method, path: portPath(pe.id, pe.guest.port, tc.rest), key: pe.keyA, body: tc.body, header: hdr, t: t}).
				want(t, http.StatusOK)
			var saw guestSaw
			if err := json.Unmarshal(res.body, &saw); err != nil {
				t.Fatalf("guest answer %s: %v", res.body, err)
			}
			switch {
			case saw.Method != tc.method || saw.Path != tc.wantPath || saw.Query != tc.wantQ || saw.Body != tc.body:
				t.Errorf("guest saw %s %s ?%s body %q", saw.Method, saw.Path, saw.Query, saw.Body)
			case saw.Host != guestHost:
				t.Errorf("guest saw Host %q, want its own %q", saw.Host, guestHost)
			case saw.Header.Get("Authorization") != "":
				t.Errorf("the guest got the caller's Authorization")
			case saw.Header.Get("Airlock-Whatever") != "":
				t.Errorf("the guest got an Airlock-* header")
			case saw.Header.Get("X-Forwarded-Host") != srvHost:
				t.Errorf("X-Forwarded-Host %q, want the caller's Host %q", saw.Header.Get("X-Forwarded-Host"), srvHost)
			case saw.Header.Get("X-Forwarded-For") != "127.0.0.1":
				t.Errorf("X-Forwarded-For %q, want the caller's address only", saw.Header.Get("X-Forwarded-For"))
			case saw.Header.Get("X-Custom") != "kept" || saw.Header.Get("Cookie") != "a=b":
				t.Errorf("the caller's own headers did not pass: %v", saw.Header)
			}
		})
	}
	// HEAD: the guest's headers, no body.
	pe.send(req{method: "HEAD", path: portPath(pe.id, pe.guest.port, "x"), key: pe.keyA}).want(t, http.StatusOK)

	// The guest's status, headers and body pass unchanged (its own
	// X-Request-Id aside: the API's stands).
	res := pe.send(req{method: "GET", path: portPath(pe.id, pe.guest.port, "teapot"), key: pe.keyA}).want(t, http.StatusTeapot)
	if string(res.body) != "short and stout" || res.header.Get("X-Guest") != "yes" || len(res.header.Values("X-Request-Id")) != 1 || res.header.Get("X-Request-Id") == "guest-own" {
		t.Errorf("guest answer: %v %q", res.header, res.body)
	}
	// A guest's page never runs as the server's (the console's) origin.
	if res.header.Get("Content-Security-Policy") != "sandbox" || res.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("guest answer without the sandbox policy: %v", res.header)
	}

	// Paths of several segments keep the caller's escapes; an empty
	// path is the guest's /.
	for _, tc := range []struct{ rest, wantRaw string }{
		{"a/b%2Fc/d.txt", "/a/b%2Fc/d.txt"},
		{"", "/"},
		{"dir/", "/dir/"},
		{"%7Euser/x%20y", "/%7Euser/x%20y"},
	} {
		res, b := pe.rawDo(t, "GET", portPath(pe.id, pe.guest.port, tc.rest), pe.keyA, nil)
		var saw guestSaw
		if res.StatusCode != http.StatusOK || json.Unmarshal(b, &saw) != nil {
			t.Fatalf("%q: %d %s", tc.rest, res.StatusCode, b)
		}
		if saw.RawPath != tc.wantRaw {
			t.Errorf("%q: the guest got path %q, want %q", tc.rest, saw.RawPath, tc.wantRaw)
		}
	}
	if touched, held, holds := pe.rec.state(); holds == 0 || held != 0 || touched != 0 {
		t.Errorf("activity: %d touches, %d holds open, %d holds: want holds, all released", touched, held, holds)
	}
}

// TestPortsProxyRefusals: what does not reach a guest, and why.
func TestPortsProxyRefusals(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t)
	p := func(id model.SandboxID, port string) string {
		return "/v1/sandboxes/" + string(id) + "/ports/" + port + "/x"
	}
	guest := strconv.Itoa(pe.guest.port)

	paused := pe.pausedSandbox(t)
	suspended := pe.runningSandbox(pe.keyA)
	pe.lifecycle(t, suspended, "suspend", pe.keyA).want(t, http.StatusAccepted)
	pe.finishNext(t, suspended, model.OpSuspend, true, &model.Snapshot{Kind: model.SnapshotMemory, Format: "runsc-checkpoint/1", Location: "/x", CreatedAt: time.Now()})
	unregistered := pe.runningSandbox(pe.keyA)
	pending := model.SandboxID(pe.createSandbox(pe.keyA, `{}`).Sandbox.ID) // its create stays unfinished
	for _, id := range []model.SandboxID{paused, suspended, pending} {
		pe.reg.Add(id, netip.MustParseAddr("127.0.0.1"), nil) // the state alone refuses them
	}
	touchedBefore, _, holdsBefore := pe.rec.state()

	for _, tc := range []struct {
		name    string
		path    string
		key     string
		invalid bool // the document rejects it too
		status  int
		code    string
	}{
		{"port 0", p(pe.id, "0"), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"port 65536", p(pe.id, "65536"), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"port -1", p(pe.id, "-1"), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"port abc", p(pe.id, "abc"), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"port 1e3", p(pe.id, "1e3"), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"leading zero", p(pe.id, "0"+guest), pe.keyA, false, 400, apiv1.CodeInvalidRequest},
		{"bad sandbox ID", p("nope", guest), pe.keyA, true, 400, apiv1.CodeInvalidRequest},
		{"no key", p(pe.id, guest), "", true, 401, apiv1.CodeUnauthenticated},
		{"another project's sandbox", p(pe.id, guest), pe.keyB, false, 404, apiv1.CodeNotFound},
		{"unknown sandbox", p(model.NewSandboxID(), guest), pe.keyA, false, 404, apiv1.CodeNotFound},
		{"paused", p(paused, guest), pe.keyA, false, 409, apiv1.CodeSandboxPaused},
		{"suspended", p(suspended, guest), pe.keyA, false, 409, apiv1.CodeSandboxSuspended},
		{"not started", p(pending, guest), pe.keyA, false, 409, apiv1.CodeSandboxNotRunning},
		{"no network", p(unregistered, guest), pe.keyA, false, 409, apiv1.CodeSandboxNoNetwork},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe.send(req{method: "GET", path: tc.path, key: tc.key, invalid: tc.invalid, t: t}).wantError(t, tc.status, tc.code)
		})
	}
	if touched, _, holds := pe.rec.state(); touched != touchedBefore || holds != holdsBefore {
		t.Errorf("refused requests were recorded as activity")
	}

	// Nothing listens: 502 port_unreachable, an Airlock error.
	res := pe.send(req{method: "POST", path: p(pe.id, strconv.Itoa(closedPort(t))), key: pe.keyA, body: `{}`}).
		wantError(t, http.StatusBadGateway, apiv1.CodePortUnreachable)
	if !strings.Contains(string(res.body), "refused") {
		t.Errorf("502 message does not say why: %s", res.body)
	}

	// A server that hosts no sandbox networks says so.
	noNet := newEnv(t)
	id := noNet.runningSandbox(noNet.keyA)
	noNet.do("GET", p(id, guest), noNet.keyA, "").wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
}

// TestPortsProxyNotRateLimited: requests to a guest are not mutations of
// Airlock's: the key's mutation rate does not count them.
func TestPortsProxyNotRateLimited(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t, func(c *envConfig) { c.MutationRate, c.MutationBurst = 0.001, 5 })
	for i := range 12 {
		pe.send(req{method: "POST", path: portPath(pe.id, pe.guest.port, "n"), key: pe.keyA, body: strconv.Itoa(i)}).want(t, http.StatusOK)
	}
}

// upgrade sends an Upgrade: echo request over a raw connection to base
// and checks that bytes then go both ways through the proxy.
func upgrade(t *testing.T, base, path, key string) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", path, u.Host, key)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(res.Header.Get("Upgrade"), "echo") {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("upgrade: %d %v %s", res.StatusCode, res.Header, b)
	}
	for _, msg := range []string{"ping\n", "pong pong\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != msg {
			t.Fatalf("echo %q, got %q, %v", msg, got, err)
		}
	}
}

// TestPortsProxyUpgradeAndStream: an upgraded connection carries bytes
// both ways, and a streamed answer reaches the caller as it is written.
func TestPortsProxyUpgradeAndStream(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t)
	upgrade(t, pe.srv.URL, portPath(pe.id, pe.guest.port, "upgrade"), pe.keyA)
	streamThrough(t, pe.srv.URL+portPath(pe.id, pe.guest.port, "stream"), pe.keyA, pe.guest)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, held, _ := pe.rec.state(); held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a finished stream still holds the sandbox active")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamThrough checks that the first chunk of /stream arrives before the
// guest writes the second.
func streamThrough(t *testing.T, u, key string, g *fakeGuest) {
	t.Helper()
	r, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	close(g.release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// TestPortsProxyForwarded: through an API replica, the request is
// forwarded to the node hosting the sandbox, streams and upgrades
// included, and the guest sees the Host the caller sent to the replica.
func TestPortsProxyForwarded(t *testing.T) {
	t.Parallel()
	reg := egress.NewRegistry(egress.RegistryConfig{})
	c := newCluster(t, func(cfg *Config) { cfg.Egress = reg })
	id := model.SandboxID(c.sandbox)
	reg.Add(id, netip.MustParseAddr("127.0.0.1"), nil)
	g := newFakeGuest(t)

	res, b := c.call(c.a, "POST", portPath(id, g.port, "run?q=1"), c.keyA, `{"code": "1+1"}`, http.Header{"X-Forwarded-Host": {"evil.example"}})
	var saw guestSaw
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &saw) != nil {
		t.Fatalf("through the replica: %d %s", res.StatusCode, b)
	}
	aHost := strings.TrimPrefix(c.a.srv.URL, "http://")
	if saw.Method != "POST" || saw.Path != "/run" || saw.Query != "q=1" || saw.Body != `{"code": "1+1"}` ||
		saw.Header.Get("X-Forwarded-Host") != aHost || saw.Header.Get("Authorization") != "" ||
		saw.Header.Get("Airlock-Forward-Token") != "" || saw.Header.Get("Airlock-Forwarded-By") != "" {
		t.Fatalf("guest saw %+v", saw)
	}
	upgrade(t, c.a.srv.URL, portPath(id, g.port, "upgrade"), c.keyA)
	streamThrough(t, c.a.srv.URL+portPath(id, g.port, "stream"), c.keyA, g)

	// A refused port: the hosting node's 502 comes back through.
	res, b = c.call(c.a, "GET", portPath(id, closedPort(t), ""), c.keyA, "", nil)
	wantCode(t, res, b, http.StatusBadGateway, apiv1.CodePortUnreachable)
}

// TestPortsGuestTransportDialsOnlyTarget: whatever URL a request names,
// the transport connects to the sandbox's address and port.
func TestPortsGuestTransportDialsOnlyTarget(t *testing.T) {
	t.Parallel()
	g := newFakeGuest(t)
	tr := guestTransport(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(g.port)))
	defer tr.CloseIdleConnections()
	for _, u := range []string{"http://192.0.2.1:22/x", "http://localhost:1/x", "http://metadata.google.internal/x"} {
		r, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		var saw guestSaw
		err = json.NewDecoder(res.Body).Decode(&saw)
		res.Body.Close()
		if err != nil || saw.Path != "/x" {
			t.Fatalf("%s did not reach the sandbox's address: %+v %v", u, saw, err)
		}
	}
}

func TestPortsParseGuestPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want model.GuestPort
		ok   bool
	}{
		{"1", 1, true}, {"80", 80, true}, {"49999", 49999, true}, {"65535", 65535, true},
		{"", 0, false}, {"0", 0, false}, {"00", 0, false}, {"080", 0, false}, {"65536", 0, false},
		{"99999", 0, false}, {"100000", 0, false}, {"-1", 0, false}, {"+80", 0, false}, {" 80", 0, false},
		{"80 ", 0, false}, {"0x50", 0, false}, {"8e1", 0, false}, {"٨٠", 0, false},
	} {
		got, err := model.ParseGuestPort(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("model.ParseGuestPort(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, model.ErrInvalid) {
			t.Errorf("model.ParseGuestPort(%q): %v does not wrap ErrInvalid", tc.in, err)
		}
	}
}

func FuzzParseGuestPort(f *testing.F) {
	for _, s := range []string{"1", "3000", "65535", "65536", "0", "080", "-1", "", "abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := model.ParseGuestPort(s)
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("%q: %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if p == 0 || strconv.Itoa(int(p)) != s {
			t.Fatalf("%q parsed as %d, not canonical", s, p)
		}
	})
}

// guestSetCookies is what the fake guest's /cookies answers: attempts to
// plant a session cookie, then cookies it may set.
var guestSetCookies = []string{
	"airlock_session=alk_attacker; Domain=example.test; Path=/v1",
	"airlock_session=alk_attacker; Path=/v1/sandboxes",
	"__Host-airlock_session=alk_attacker; Secure; Path=/",
	" AIRLOCK_SESSION =alk_attacker",
	// Nameless cookies: a browser sends back their value alone,
	// "airlock_session=alk_attacker", read as the session cookie.
	"=airlock_session=alk_attacker; Path=/",
	" =\t__Host-airlock_session=alk_attacker",
	"airlock_session",
	"theme=dark; Domain=example.test; Path=/",
	"tracker=1; path=/; domain=.example.test",
	"theme=light; Path=/v1/sandboxes; HttpOnly",
	"sid=abc",
}

// TestPortsProxyDropsPlantedCookies: a guest's answer cannot set the
// console's session cookie (either spelling), nor any cookie for other
// hosts (Domain), nor a nameless cookie a browser sends back as the
// session cookie ("=airlock_session=…"); its own host-only cookies pass.
func TestPortsProxyDropsPlantedCookies(t *testing.T) {
	t.Parallel()
	pe := newPortEnv(t)
	res := pe.send(req{method: "GET", path: portPath(pe.id, pe.guest.port, "cookies"), key: pe.keyA}).want(t, http.StatusOK)
	got := res.header.Values("Set-Cookie")
	want := []string{"theme=light; Path=/v1/sandboxes; HttpOnly", "sid=abc"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Set-Cookie from the guest = %q, want only %q", got, want)
	}
}
