package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// benchEnv has the same small HTTPS upstream reachable as an intercepted name, an exempt name,
// and directly; and a large download on each path.
func benchEnv(b *testing.B, size int64) (*env, map[string]*http.Client, map[string]string) {
	chunk := make([]byte, 256<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for left := size; left > 0; left -= int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return
			}
		}
	})
	e := newEnv(b, envOpts{policy: basePolicy})
	up := e.httpsUpstream("203.0.113.20", true, h, "secure.test")
	e.route("203.0.113.30", 443, up.Listener.Addr().String(), "exempt.test")
	e.httpUpstream("203.0.113.10", h, "plain.test")
	e.bind("secure.test", "203.0.113.20")
	e.bind("exempt.test", "203.0.113.30")
	e.bind("plain.test", "203.0.113.10")
	upRoots := x509.NewCertPool()
	upRoots.AddCert(e.upCA.Certificate())
	direct := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.Listener.Addr().String())
		},
		TLSClientConfig:   &tls.Config{RootCAs: upRoots},
		DisableKeepAlives: true,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	b.Cleanup(direct.CloseIdleConnections)
	clients := map[string]*http.Client{
		"direct":         {Transport: direct},
		"exempt":         e.client(clientOpts{roots: upRoots}),
		"intercepted":    e.client(clientOpts{}),
		"intercepted-h2": e.client(clientOpts{h2: true}),
		"plain":          e.client(clientOpts{}),
	}
	urls := map[string]string{
		"direct":         "https://secure.test",
		"exempt":         "https://exempt.test",
		"intercepted":    "https://secure.test",
		"intercepted-h2": "https://secure.test",
		"plain":          "http://plain.test",
	}
	return e, clients, urls
}

// BenchmarkHandshake is one new HTTPS connection and a small request on it: directly to the
// upstream, through the proxy as an exempt relay, and intercepted (the leaf cached after the
// first iteration). p50/p95 per connection are reported as metrics.
func BenchmarkHandshake(b *testing.B) {
	_, clients, urls := benchEnv(b, 0)
	for _, name := range []string{"direct", "exempt", "intercepted"} {
		b.Run(name, func(b *testing.B) {
			c := clients[name]
			get := func() {
				resp, err := c.Get(urls[name] + "/small")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			get() // warm: leaf minted, code paths paged in
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				get()
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds()), "p95-µs")
		})
	}
}

// BenchmarkDownload is one large download per iteration on each path (MB/s).
func BenchmarkDownload(b *testing.B) {
	const size = 256 << 20
	_, clients, urls := benchEnv(b, size)
	for _, name := range []string{"direct", "exempt", "intercepted", "intercepted-h2", "plain"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				resp, err := clients[name].Get(urls[name] + "/big")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		})
	}
}
