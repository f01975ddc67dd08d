package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/airlockdev/airlock/internal/egress/decisionlog"
)

// TestTLSDeniedBeforeHandshake: a name the policy denies, or one without a binding to the
// dialled address, is refused at its SNI: the connection closes without a handshake, so the
// sandbox gets no leaf (and the proxy mints none).
func TestTLSDeniedBeforeHandshake(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", false, whoami("secure"), "secure.test", "blocked.test")
	e.bind("secure.test", "203.0.113.20")
	e.bind("blocked.test", "203.0.113.20")
	for _, tc := range []struct {
		name, sni, dst string
		ok             bool
		rule           string
	}{
		{"allowed (control)", "secure.test", "203.0.113.20:443", true, ""},
		{"denied name", "blocked.test", "203.0.113.20:443", false, "default none"},
		{"unbound name", "secure.test", "203.0.113.99:443", false, "no-binding"},
		{"random unbound names", "x1.random.test", "203.0.113.20:443", false, "default none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.dialGuest(context.Background(), netip.MustParseAddrPort(tc.dst))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			tc2 := tls.Client(c, &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
			err = tc2.Handshake()
			if tc.ok != (err == nil) {
				t.Fatalf("handshake: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && len(tc2.ConnectionState().PeerCertificates) > 0 {
				t.Fatal("the proxy sent a certificate for a denied name")
			}
			if tc.rule == "" {
				return
			}
			if ev := e.event(tc.rule, false); ev.Kind != decisionlog.KindTLS {
				t.Fatalf("decision kind %q, want %q", ev.Kind, decisionlog.KindTLS)
			}
		})
	}
}

// TestSecretReflectingMethods: TRACE and TRACK, which echo the request back, are refused on a
// request that would get a secret, so the value never reaches the sandbox.
func TestSecretReflectingMethods(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	reflect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s auth=%s", r.Method, r.Header.Get("Authorization"))
	})
	e.httpsUpstream("203.0.113.40", false, reflect, "api.test")
	e.httpsUpstream("203.0.113.41", false, reflect, "other.test")
	e.bind("api.test", "203.0.113.40")
	e.bind("other.test", "203.0.113.41")
	e.mu.Lock()
	e.secrets[e.sb.ID] = []Secret{{Name: "OPENAI", Hosts: []string{"api.test"}, Header: "Authorization", Value: "Bearer sk-real", Placeholder: "airlock-secret:OPENAI"}}
	e.mu.Unlock()
	for _, h2 := range []bool{false, true} {
		c := e.client(clientOpts{h2: h2})
		for _, tc := range []struct {
			method, url string
			code        int
			contains    string
		}{
			{"TRACE", "https://api.test/", 403, "secret-method"},
			{"TRACK", "https://api.test/", 403, "secret-method"},
			{"trace", "https://api.test/", 403, "secret-method"},
			{"GET", "https://api.test/", 200, "auth=Bearer sk-real"},
			{"TRACE", "https://other.test/", 200, "TRACE auth="},
		} {
			t.Run(fmt.Sprintf("h2=%v %s %s", h2, tc.method, tc.url), func(t *testing.T) {
				req, err := http.NewRequest(tc.method, tc.url, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.contains) {
					t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, b, tc.code, tc.contains)
				}
				if tc.method != "GET" && strings.Contains(string(b), "sk-real") {
					t.Fatalf("the secret was reflected: %q", b)
				}
				if tc.code == 403 {
					e.event("secret-method", false)
				}
			})
		}
	}
}

// closedSoon reports whether the proxy closes c within d without it sending anything.
func closedSoon(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("still open after %v", d)
	case err == nil:
		return fmt.Errorf("read %d bytes", n)
	}
	return nil
}

// TestAcceptLimits: silent connections (no ClientHello, no request) count from accept, per
// source and in total; one over a limit is closed at once, not after the handshake timeout.
func TestAcceptLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     envOpts
		limit int
		rule  bool // a decision is logged
	}{
		{"per source", envOpts{maxPerSource: 3}, 3, true},
		{"global", envOpts{maxTotal: 4}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.policy = basePolicy
			e := newEnv(t, tc.o)
			dst := netip.MustParseAddrPort("203.0.113.20:443")
			for i := 0; i < tc.limit; i++ {
				c, err := e.dialGuest(context.Background(), dst)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			over, err := e.dialGuest(context.Background(), dst)
			if err != nil {
				t.Fatal(err)
			}
			defer over.Close()
			if err := closedSoon(over, 2*time.Second); err != nil {
				t.Fatalf("connection over the limit: %v", err)
			}
			if tc.rule {
				e.event("connection-limit", false)
			}
		})
	}
}

// TestAcceptLimitFreed: a closed connection frees its place under the per-source limit.
func TestAcceptLimitFreed(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy, maxPerSource: 1})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	dst := netip.MustParseAddrPort("198.51.100.7:2222")
	for i := 0; i < 3; i++ {
		c, err := e.dialGuest(context.Background(), dst)
		if err != nil {
			t.Fatal(err)
		}
		if err := echoRoundTrip(c, "hi"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
		deadline := time.Now().Add(5 * time.Second)
		for e.sb.OpenConns() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("closed connection still tracked")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The proxy's side may close a moment after the sandbox's is untracked.
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTP2StreamLimit: the proxy's HTTP/2 server advertises a small MaxConcurrentStreams, so
// a sandbox's connections cannot each carry hundreds of upstream requests.
func TestHTTP2StreamLimit(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", false, whoami("secure"), "secure.test")
	e.bind("secure.test", "203.0.113.20")
	c, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("203.0.113.20:443"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "secure.test", InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T, want SETTINGS", f)
	}
	n, ok := sf.Value(http2.SettingMaxConcurrentStreams)
	if !ok || n > maxStreamsPerConn {
		t.Fatalf("MaxConcurrentStreams %d (set %v), want at most %d", n, ok, maxStreamsPerConn)
	}
}

// TestUpstreamConnsPerHost: one sandbox connection's transport opens a bounded number of
// upstream connections per host.
func TestUpstreamConnsPerHost(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	tr := e.px.newTransport(&clientConn{p: e.px, sb: e.sb})
	if tr.MaxConnsPerHost <= 0 || tr.MaxConnsPerHost > maxUpstreamConnsPerHost {
		t.Fatalf("MaxConnsPerHost %d, want 1..%d", tr.MaxConnsPerHost, maxUpstreamConnsPerHost)
	}
}

// TestCloseWaits: once Close returns, none of the proxy's goroutines serving sandbox
// connections is left: relays, HTTP/1.1 and HTTP/2 handlers in the middle of a request.
func TestCloseWaits(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	started := make(chan struct{}, 4)
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		started <- struct{}{}
		<-r.Context().Done()
	})
	e.httpsUpstream("203.0.113.20", true, stream, "secure.test")
	e.httpUpstream("203.0.113.10", stream, "plain.test")
	e.bind("secure.test", "203.0.113.20")
	e.bind("plain.test", "203.0.113.10")

	raw, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("198.51.100.7:2222"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := echoRoundTrip(raw, "x"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c   *http.Client
		url string
	}{
		{e.client(clientOpts{h2: true}), "https://secure.test/"},
		{e.client(clientOpts{}), "https://secure.test/"},
		{e.client(clientOpts{}), "http://plain.test/"},
	} {
		resp, err := tc.c.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		<-started
	}
	if err := e.px.Close(); err != nil {
		t.Fatal(err)
	}
	for _, g := range proxyGoroutines() {
		t.Errorf("still running after Close:\n%s", g)
	}
}

// proxyGoroutines returns the stacks of the goroutines in the proxy's
// serving functions (the test's own goroutines run in this package too),
// but for those in the call that released Close's wait, their last
// (WaitGroup.Done in a deferred call: a handler that ended by a panic,
// as the reverse proxy's abort, reports its connection closed from
// net/http's recovery, on the handler's stack).
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	var out []string
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "sync.(*WaitGroup).Done(") {
			continue
		}
		for _, fn := range []string{"proxy.(*Proxy).serveRequest", "proxy.(*Proxy).relay", "proxy.(*Proxy).handle(", "proxy.pipe(", "proxy.(*clientConn).Read("} {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestCloseWaitsForHTTP2Handler: Close does not return while an HTTP/2 request handler is
// still running (here held inside SecretsFor), and returns once it ends.
func TestCloseWaitsForHTTP2Handler(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", true, whoami("secure"), "secure.test")
	e.bind("secure.test", "203.0.113.20")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.mu.Lock()
	e.onSecrets = func() {
		once.Do(func() { close(entered) })
		<-release
	}
	e.mu.Unlock()
	c := e.client(clientOpts{h2: true})
	reqDone := make(chan struct{})
	go func() {
		defer close(reqDone)
		if resp, err := c.Get("https://secure.test/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- e.px.Close() }()
	select {
	case <-closed:
		close(release)
		<-reqDone
		t.Fatal("Close returned while a request handler was running")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the handler ended")
	}
	<-reqDone
}
