package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/decisionlog"
)

// whoami answers with what the upstream saw.
func whoami(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host=%s proto=%s auth=%s path=%s", name, r.Host, r.Proto, r.Header.Get("Authorization"), r.URL.RequestURI())
	})
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

const basePolicy = `{"default":"none","allow":["plain.test","secure.test","h2.test","api.test","other.test","exempt.test",
 "db.test:5432","198.51.100.0/24:2222"],"tls_exempt":["exempt.test"]}`

func TestHTTP(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpUpstream("203.0.113.10", whoami("plain"), "plain.test")
	e.httpUpstream("203.0.113.11", whoami("blocked"), "blocked.test")
	e.bind("plain.test", "203.0.113.10")
	e.bind("blocked.test", "203.0.113.11")
	c := e.client(clientOpts{})

	for _, tc := range []struct {
		name     string
		url      string
		hdr      []string
		spoof    string // guest-side address for the name
		code     int
		contains string
		rule     string
	}{
		{name: "allowed", url: "http://plain.test/a?b=c", code: 200, contains: "plain host=plain.test proto=HTTP/1.1 auth= path=/a?b=c", rule: "allow plain.test"},
		{name: "allowed with port", url: "http://plain.test:80/", code: 200, contains: "plain host=plain.test:80"},
		{name: "denied name", url: "http://blocked.test/", code: 403, contains: `"default none"`, rule: "default none"},
		{name: "spoofed address: no binding", url: "http://plain.test/", spoof: "203.0.113.11", code: 403, contains: "no-binding", rule: "no-binding"},
		{name: "blocked Host on an allowed name's address", url: "http://plain.test/", hdr: []string{"Host", "blocked.test"}, code: 403, contains: "default none"},
		// A name bound to the address opens a raw port only through a rule naming that port.
		{name: "direct IP of an allowed bound name", url: "http://203.0.113.10/", code: 403, contains: "no-port-rule", rule: "no-port-rule"},
		{name: "direct IP of a blocked bound name", url: "http://203.0.113.11/", code: 403, contains: "no-address-rule", rule: "no-address-rule"},
		{name: "bad host", url: "http://plain.test/", hdr: []string{"Host", "a b"}, code: 400, contains: "bad-host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.spoof != "" {
				e.mu.Lock()
				e.guestDNS["plain.test"] = netip.MustParseAddr(tc.spoof)
				e.mu.Unlock()
				defer func() { e.mu.Lock(); delete(e.guestDNS, "plain.test"); e.mu.Unlock() }()
			}
			code, body, _ := get(t, c, tc.url, tc.hdr...)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Fatalf("got %d %q, want %d containing %q", code, body, tc.code, tc.contains)
			}
			if tc.rule != "" {
				e.event(tc.rule, tc.code == 200)
			}
		})
	}
}

func TestHTTPKeepAliveRechecked(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpUpstream("203.0.113.10", whoami("plain"), "plain.test", "blocked.test")
	e.bind("plain.test", "203.0.113.10")
	e.bind("blocked.test", "203.0.113.10")
	conn, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("203.0.113.10:80"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i, tc := range []struct {
		host string
		code int
	}{{"plain.test", 200}, {"blocked.test", 403}, {"plain.test", 200}} {
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", tc.host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("request %d to %s: %d, want %d", i, tc.host, resp.StatusCode, tc.code)
		}
	}
	// CONNECT is refused.
	fmt.Fprintf(conn, "CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
}

func TestHeaderTooLarge(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpUpstream("203.0.113.10", whoami("plain"), "plain.test")
	e.bind("plain.test", "203.0.113.10")
	_, _, resp := get(t, e.client(clientOpts{}), "http://plain.test/", "X-Big", strings.Repeat("a", 200<<10))
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestHTTPSIntercepted(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", false, whoami("secure"), "secure.test", "blocked.test")
	e.httpsUpstream("203.0.113.21", true, whoami("h2"), "h2.test")
	e.bind("secure.test", "203.0.113.20")
	e.bind("blocked.test", "203.0.113.20")
	e.bind("h2.test", "203.0.113.21")
	c1 := e.client(clientOpts{})
	c2 := e.client(clientOpts{h2: true})
	for _, tc := range []struct {
		name     string
		c        *http.Client
		url      string
		hdr      []string
		code     int
		proto    string
		contains string
		rule     string
	}{
		{name: "allowed", c: c1, url: "https://secure.test/x", code: 200, proto: "HTTP/1.1", contains: "secure host=secure.test proto=HTTP/1.1 auth= path=/x", rule: "allow secure.test"},
		{name: "HTTP/2 both sides", c: c2, url: "https://h2.test/y", code: 200, proto: "HTTP/2.0", contains: "h2 host=h2.test proto=HTTP/2.0"},
		{name: "HTTP/2 to an HTTP/1.1 upstream", c: c2, url: "https://secure.test/", code: 200, proto: "HTTP/2.0", contains: "secure host=secure.test proto=HTTP/1.1"},
		{name: "SNI allowed, Host blocked", c: c1, url: "https://secure.test/", hdr: []string{"Host", "blocked.test"}, code: 421, contains: "host-sni-mismatch", rule: "host-sni-mismatch"},
		{name: "SNI allowed, :authority blocked", c: c2, url: "https://h2.test/", hdr: []string{"Host", "blocked.test"}, code: 421, proto: "HTTP/2.0", contains: "host-sni-mismatch"},
		{name: "Host with the SNI and port 443", c: c1, url: "https://secure.test:443/", code: 200, contains: "secure host=secure.test:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, resp := get(t, tc.c, tc.url, tc.hdr...)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Fatalf("got %d %q, want %d containing %q", code, body, tc.code, tc.contains)
			}
			if tc.proto != "" && resp.Proto != tc.proto {
				t.Fatalf("proto %s, want %s", resp.Proto, tc.proto)
			}
			if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != e.ca.Certificate().Subject.CommonName {
				t.Fatalf("leaf issued by %q, not the deployment CA", iss)
			}
			if tc.rule != "" {
				e.event(tc.rule, tc.code == 200)
			}
		})
	}
	// A client that does not trust the deployment CA fails its handshake.
	pool := x509.NewCertPool()
	pool.AddCert(e.upCA.Certificate())
	if _, err := e.client(clientOpts{roots: pool}).Get("https://secure.test/"); err == nil {
		t.Fatal("handshake succeeded without trusting the deployment CA")
	}
}

func TestHTTPSNoBinding(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", false, whoami("secure"), "secure.test")
	// No binding recorded: the guest resolved secure.test elsewhere (its /etc/hosts, say).
	// Denied at the SNI: closed without a handshake (TestTLSDeniedBeforeHandshake).
	if resp, err := e.client(clientOpts{}).Get("https://secure.test/"); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the connection closed", resp.StatusCode)
	}
	if ev := e.event("no-binding", false); ev.Kind != decisionlog.KindTLS {
		t.Fatalf("no-binding logged as %q, want %q", ev.Kind, decisionlog.KindTLS)
	}
	if n := e.upstreamDials(); n != 0 {
		t.Fatalf("%d upstream dials for a denied request", n)
	}
}

// clientHello captures the first TLS record a Go client sends for serverName.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	return capture(t, serverName)
}

func capture(t testing.TB, serverName string) []byte {
	c1, c2 := net.Pipe()
	go func() {
		_ = tls.Client(c1, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
		c1.Close()
	}()
	defer c2.Close()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c2, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(c2, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func TestTLSRefused(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.20", false, whoami("secure"), "secure.test", "dns.google")
	e.bind("secure.test", "203.0.113.20")
	e.bind("dns.google", "203.0.113.20")
	// Go clients never send an IP literal as SNI: write a name of the same length over it.
	ipHello := bytes.Replace(clientHello(t, "abc.def.ghi"), []byte("abc.def.ghi"), []byte("203.0.113.2"), 1)
	for _, tc := range []struct {
		name  string
		hello []byte
		rule  string
	}{
		{"no SNI", clientHello(t, ""), "no-sni"},
		{"IP-literal SNI", ipHello, "ip-sni"},
		{"not TLS", []byte("GET / HTTP/1.1\r\nHost: secure.test\r\n\r\n"), "no-client-hello"},
		{"DoH resolver", clientHello(t, "dns.google"), "doh-resolver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("203.0.113.20:443"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.hello); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 100)); err == nil || n > 0 {
				t.Fatalf("read %d bytes, %v: the connection was not closed", n, err)
			}
			e.event(tc.rule, false)
		})
	}
}

func TestExemptRelay(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	e.httpsUpstream("203.0.113.30", false, whoami("exempt"), "exempt.test")
	e.bind("exempt.test", "203.0.113.30")
	pool := x509.NewCertPool()
	pool.AddCert(e.upCA.Certificate())
	code, body, resp := get(t, e.client(clientOpts{roots: pool}), "https://exempt.test/z")
	if code != 200 || !strings.Contains(body, "exempt host=exempt.test") {
		t.Fatalf("got %d %q", code, body)
	}
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != e.upCA.Certificate().Subject.CommonName {
		t.Fatalf("the client saw a certificate issued by %q, not the upstream's", iss)
	}
	e.event("allow exempt.test", true)
	// An exemption by name still needs the binding.
	e.mu.Lock()
	e.guestDNS["exempt.test"] = netip.MustParseAddr("203.0.113.31")
	e.mu.Unlock()
	if _, err := e.client(clientOpts{roots: pool}).Get("https://exempt.test/"); err == nil {
		t.Fatal("exempt relay without a binding succeeded")
	}
	e.event("no-binding", false)
}

func echoRoundTrip(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("echo %q, want %q", b, msg)
	}
	return nil
}

func TestOtherPorts(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	e.route("203.0.113.50", 5432, ln.Addr().String(), "db.test")
	e.route("203.0.113.51", 5432, ln.Addr().String())
	e.route("198.51.100.7", 2223, ln.Addr().String())
	e.bind("db.test", "203.0.113.50")
	for _, tc := range []struct {
		dst  string
		ok   bool
		rule string
	}{
		{"198.51.100.7:2222", true, "allow 198.51.100.0/24:2222"},
		{"203.0.113.50:5432", true, "allow db.test:5432"},
		{"203.0.113.51:5432", false, "no-address-rule"},
		{"198.51.100.7:2223", false, "no-address-rule"},
		{"203.0.113.50:853", false, "dns-over-tls"},
	} {
		t.Run(tc.dst, func(t *testing.T) {
			c, err := e.dialGuest(context.Background(), netip.MustParseAddrPort(tc.dst))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = echoRoundTrip(c, "hello "+tc.dst)
			if (err == nil) != tc.ok {
				t.Fatalf("echo: %v, want ok=%v", err, tc.ok)
			}
			e.event(tc.rule, tc.ok)
		})
	}
}

func TestUnknownSource(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	c, err := e.dialFrom(context.Background(), "127.0.0.3", netip.MustParseAddrPort("198.51.100.7:2222"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echoRoundTrip(c, "x"); err == nil {
		t.Fatal("a connection from an unknown source was relayed")
	}
}

func TestSecrets(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	for _, n := range []struct{ name, ip string }{{"api.test", "203.0.113.40"}, {"other.test", "203.0.113.41"}} {
		e.httpsUpstream(n.ip, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s auth=%s key=%s body=%s", n.name, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), b)
		}), n.name)
		e.bind(n.name, n.ip)
	}
	e.httpUpstream("203.0.113.40", whoami("plain-api"), "api.test")
	const ph = "airlock-secret:OPENAI"
	e.secrets[e.sb.ID] = []Secret{
		{Name: "OPENAI", Hosts: []string{"api.test"}, Header: "Authorization", Value: "Bearer sk-real", Placeholder: ph},
		{Name: "NOPH", Hosts: []string{"*.nowhere.test"}, Header: "X-Other", Value: "v"},
	}
	c := e.client(clientOpts{h2: true})
	post := func(url, body string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name       string
		url, body  string
		hdr        []string
		code       int
		contains   string
		notContain string
	}{
		{name: "injected, placeholder replaced", url: "https://api.test/", hdr: []string{"Authorization", "Bearer " + ph}, code: 200, contains: "auth=Bearer sk-real"},
		{name: "injected without a placeholder", url: "https://api.test/", code: 200, contains: "auth=Bearer sk-real"},
		{name: "placeholder elsewhere at its own host is fine", url: "https://api.test/", body: "x " + ph, code: 200, contains: "auth=Bearer sk-real"},
		{name: "not injected elsewhere", url: "https://other.test/", code: 200, contains: "auth= ", notContain: "sk-real"},
		{name: "placeholder header to another host", url: "https://other.test/", hdr: []string{"X-Api-Key", ph}, code: 403, contains: "secret-placeholder"},
		{name: "placeholder in the URL to another host", url: "https://other.test/?k=" + ph, code: 403, contains: "secret-placeholder"},
		{name: "placeholder in the body to another host", url: "https://other.test/", body: strings.Repeat("x", 5000) + ph, code: 403, contains: "secret-placeholder", notContain: ph},
		{name: "cleartext to the secret's host: not injected", url: "http://api.test/", code: 200, contains: "auth= ", notContain: "sk-real"},
		{name: "cleartext with the placeholder: refused", url: "http://api.test/", hdr: []string{"Authorization", "Bearer " + ph}, code: 403, contains: "HTTPS only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.url, tc.body, tc.hdr...)
			if code != tc.code || !strings.Contains(body, tc.contains) || (tc.notContain != "" && strings.Contains(body, tc.notContain)) {
				t.Fatalf("got %d %q; want %d containing %q, not %q", code, body, tc.code, tc.contains, tc.notContain)
			}
			if tc.code == 403 {
				e.event("secret-placeholder", false)
			}
		})
	}
}

func TestSetPolicyCuts(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	e.httpsUpstream("203.0.113.20", false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := w.Write([]byte("tick\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}), "secure.test")
	e.bind("secure.test", "203.0.113.20")

	raw, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("198.51.100.7:2222"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := echoRoundTrip(raw, "before"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.client(clientOpts{}).Get("https://secure.test/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if n := e.sb.OpenConns(); n != 2 {
		t.Fatalf("%d tracked connections, want 2", n)
	}

	e.sb.SetPolicy(compile(t, `{"default":"none","allow":["plain.test"]}`))

	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := raw.Read(make([]byte, 10)); err == nil {
		t.Fatalf("raw relay still open after the policy change (read %d)", n)
	}
	streamDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		streamDone <- err
	}()
	select {
	case <-streamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("intercepted stream still open after the policy change")
	}
	e.event("allow 198.51.100.0/24:2222", true)
	evs, _ := e.sb.Log.Since(0)
	cuts := 0
	for _, ev := range evs {
		if ev.Kind == "cut" {
			cuts++
		}
	}
	if cuts != 2 {
		t.Fatalf("%d cut events, want 2", cuts)
	}
}

func TestConnectionLimit(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy, maxConns: 2})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	dst := netip.MustParseAddrPort("198.51.100.7:2222")
	var open []net.Conn
	for i := 0; i < 2; i++ {
		c, err := e.dialGuest(context.Background(), dst)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := echoRoundTrip(c, "hi"); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	c, err := e.dialGuest(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := echoRoundTrip(c, "hi"); err == nil {
		t.Fatal("a connection over the limit was relayed")
	}
	c.Close()
	e.event("connection-limit", false)
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for e.sb.OpenConns() > 1 {
		if time.Now().After(deadline) {
			t.Fatal("closed connection still tracked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, err = e.dialGuest(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echoRoundTrip(c, "again"); err != nil {
		t.Fatalf("under the limit again: %v", err)
	}
}

func TestLargeTransfer(t *testing.T) {
	const size = 32 << 20
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	e := newEnv(t, envOpts{policy: basePolicy})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			hh := sha256.New()
			io.Copy(hh, r.Body)
			fmt.Fprintf(w, "%x", hh.Sum(nil))
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	})
	e.httpsUpstream("203.0.113.20", true, h, "secure.test")
	e.httpsUpstream("203.0.113.30", false, h, "exempt.test")
	e.httpUpstream("203.0.113.10", h, "plain.test")
	for _, n := range []string{"secure.test", "exempt.test", "plain.test"} {
		e.bind(n, e.names[n][0].String())
	}
	pool := x509.NewCertPool()
	pool.AddCert(e.upCA.Certificate())
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"intercepted HTTP/1.1", e.client(clientOpts{}), "https://secure.test/big"},
		{"intercepted HTTP/2", e.client(clientOpts{h2: true}), "https://secure.test/big"},
		{"exempt relay", e.client(clientOpts{roots: pool}), "https://exempt.test/big"},
		{"plain HTTP", e.client(clientOpts{}), "http://plain.test/big"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.c.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			hh := sha256.New()
			n, err := io.Copy(hh, resp.Body)
			resp.Body.Close()
			if err != nil || n != size || !bytes.Equal(hh.Sum(nil), want[:]) {
				t.Fatalf("download: %d bytes, %v, hash match %v", n, err, bytes.Equal(hh.Sum(nil), want[:]))
			}
			resp, err = tc.c.Post(tc.url, "application/octet-stream", bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != fmt.Sprintf("%x", want) {
				t.Fatalf("upload hash %q", b)
			}
		})
	}
}

func TestRemoveClosesConnections(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy})
	ln := tcpUpstream(t, echo)
	e.route("198.51.100.7", 2222, ln.Addr().String())
	c, err := e.dialGuest(context.Background(), netip.MustParseAddrPort("198.51.100.7:2222"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echoRoundTrip(c, "x"); err != nil {
		t.Fatal(err)
	}
	e.reg.Remove(e.sb.ID)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection open after its sandbox was removed")
	}
}

func TestConnectionLimitCountsDeniedHTTP(t *testing.T) {
	e := newEnv(t, envOpts{policy: basePolicy, maxConns: 1})
	e.httpUpstream("203.0.113.10", whoami("plain"), "plain.test", "blocked.test")
	e.bind("plain.test", "203.0.113.10")
	e.bind("blocked.test", "203.0.113.10")
	dst := netip.MustParseAddrPort("203.0.113.10:80")
	roundTrip := func(c net.Conn, host string) int {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	c1, err := e.dialGuest(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if code := roundTrip(c1, "blocked.test"); code != 403 {
		t.Fatalf("denied request: %d", code)
	}
	c2, err := e.dialGuest(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if code := roundTrip(c2, "plain.test"); code != http.StatusServiceUnavailable {
		t.Fatalf("second connection at a limit of 1: %d", code)
	}
	e.event("connection-limit", false)
}

// TestDialsOwnResolution: the proxy connects to its own resolution of the name, not to the
// address the guest dialled, and never to an always-denied address it resolves to.
func TestDialsOwnResolution(t *testing.T) {
	e := newEnv(t, envOpts{policy: `{"default":"public"}`})
	e.httpUpstream("203.0.113.61", whoami("rotated"), "rot.test")
	e.bind("rot.test", "203.0.113.60") // what the guest resolved earlier; no longer in DNS, not routed
	e.route("203.0.113.62", 80, "127.0.0.1:1")
	e.mu.Lock()
	e.names["rebind.test"] = []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("127.0.0.1")}
	e.mu.Unlock()
	e.bind("rebind.test", "203.0.113.62")
	c := e.client(clientOpts{})
	e.mu.Lock()
	e.guestDNS["rot.test"] = netip.MustParseAddr("203.0.113.60")
	e.guestDNS["rebind.test"] = netip.MustParseAddr("203.0.113.62")
	e.mu.Unlock()
	if code, body, _ := get(t, c, "http://rot.test/"); code != 200 || !strings.HasPrefix(body, "rotated") {
		t.Fatalf("rotated name: %d %q", code, body)
	}
	before := e.upstreamDials()
	if code, body, _ := get(t, c, "http://rebind.test/"); code != http.StatusBadGateway || !strings.Contains(body, "no address the sandbox may reach") {
		t.Fatalf("name rebound to private addresses: %d %q", code, body)
	}
	if e.upstreamDials() != before {
		t.Fatal("the proxy dialled an always-denied address")
	}
}

// TestTLSByAddress: TLS that names no host is relayed untouched to the dialled address when an
// address rule allows it (E2B's allowOut of an IP, `curl https://1.1.1.1`), and refused as
// before when only a name rule or the default could.
func TestTLSByAddress(t *testing.T) {
	e := newEnv(t, envOpts{policy: `{"default":"public","allow":["198.51.100.7:443"]}`})
	leaf, err := e.upCA.Leaf("addr.test")
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(whoami("by-address"))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	s.StartTLS()
	t.Cleanup(s.Close)
	e.route("198.51.100.7", 443, s.Listener.Addr().String())
	e.route("198.51.100.8", 443, s.Listener.Addr().String())
	fetch := func(ip string) (string, error) {
		c, err := e.dialGuest(context.Background(), netip.AddrPortFrom(netip.MustParseAddr(ip), 443))
		if err != nil {
			return "", err
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // no ServerName: no SNI
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := tc.Write([]byte("GET /x HTTP/1.1\r\nHost: " + ip + "\r\nConnection: close\r\n\r\n")); err != nil {
			return "", err
		}
		b, err := io.ReadAll(tc)
		return string(b), err
	}
	body, err := fetch("198.51.100.7")
	if err != nil || !strings.Contains(body, "by-address") {
		t.Fatalf("allowed address: %q, %v", body, err)
	}
	e.event("allow 198.51.100.7:443", true)
	if body, err := fetch("198.51.100.8"); err == nil && strings.Contains(body, "by-address") {
		t.Fatalf("an address no rule allows was relayed: %q", body)
	}
	e.event("no-sni", false)
}
