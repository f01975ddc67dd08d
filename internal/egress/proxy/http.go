package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/textclip"
)

type reqKey struct{}

// reqState is what one request's upstream error handler needs to know.
type reqState struct {
	placeholder atomic.Pointer[string] // a placeholder found in the body
}

// serveRequest judges and forwards one HTTP request of a sandbox: plain (port 80) or inside
// terminated TLS.
func (p *Proxy) serveRequest(w http.ResponseWriter, r *http.Request) {
	if !p.enterHandler() {
		w.Header().Set("Connection", "close")
		refuse(w, http.StatusServiceUnavailable, "shutting-down", "the egress proxy is shutting down")
		return
	}
	defer p.wg.Done()
	cc, _ := r.Context().Value(connKey{}).(*clientConn)
	if cc == nil || cc.sb == nil {
		http.Error(w, "airlock egress: internal error", http.StatusInternalServerError)
		return
	}
	sb, dst := cc.sb, cc.dst
	if r.Method == http.MethodConnect {
		p.deny(sb, decisionlog.KindHTTP, textclip.Bytes(r.Host, maxEcho), dst, "connect-method", "CONNECT is refused: the egress proxy is transparent, not a forward proxy")
		refuse(w, http.StatusMethodNotAllowed, "connect-method", "CONNECT is refused: the egress proxy is transparent, not a forward proxy")
		return
	}
	var (
		host   string // the normalized name the request goes to; "" for a request by address
		byAddr bool
		d      policy.Decision
	)
	t, err := parseHost(r.Host)
	switch {
	case cc.sni != "":
		if err != nil || t.name != cc.sni || (t.port != 0 && t.port != dst.Port()) {
			reason := fmt.Sprintf("the request's Host %q is not the TLS server name %s", textclip.Bytes(r.Host, maxEcho), cc.sni)
			p.deny(sb, decisionlog.KindHTTP, textclip.Bytes(r.Host, maxEcho), dst, "host-sni-mismatch", reason)
			refuse(w, http.StatusMisdirectedRequest, "host-sni-mismatch", reason)
			return
		}
		host = cc.sni
		d = sb.Decide(decisionlog.KindHTTP, host, dst.Addr(), dst.Port())
	case err != nil:
		if !p.trackPlain(w, cc, "") {
			return
		}
		reason := fmt.Sprintf("the request's Host %q is not a host name or address: %v", textclip.Bytes(r.Host, maxEcho), err)
		p.deny(sb, decisionlog.KindHTTP, textclip.Bytes(r.Host, maxEcho), dst, "bad-host", reason)
		refuse(w, http.StatusBadRequest, "bad-host", reason)
		return
	case t.ip.IsValid():
		// A cleartext connection is tracked (and counted against the limit) before each
		// decision, allowed or not, under the host of its current request.
		if !p.trackPlain(w, cc, "") {
			return
		}
		byAddr = true
		d, host = sb.DecideAddr(decisionlog.KindHTTP, dst.Addr(), dst.Port())
	default:
		if !p.trackPlain(w, cc, t.name) {
			return
		}
		host = t.name
		d = sb.Decide(decisionlog.KindHTTP, host, dst.Addr(), dst.Port())
	}
	if d.Allowed && host != "" && policy.IsDoHResolver(host) {
		d = policy.Decision{Rule: "doh-resolver", Reason: host + " is a DNS-over-HTTPS resolver; the sandbox's only resolver is Airlock's"}
		p.deny(sb, decisionlog.KindHTTP, host, dst, d.Rule, d.Reason)
	}
	if !d.Allowed {
		p.log.Info("egress denied", "sandbox", sb.ID, "kind", decisionlog.KindHTTP, "host", host, "dst", dst, "rule", d.Rule)
		refuse(w, http.StatusForbidden, d.Rule, d.Reason)
		return
	}
	if byAddr && host != "" && !p.trackPlain(w, cc, host) { // allowed by a bound name: tracked under it
		return
	}

	// Secrets: injected into HTTPS requests to their hosts; their placeholders go nowhere else.
	// TRACE and TRACK echo the request back, which would hand the injected value to the
	// sandbox: a request that would get a secret is refused instead.
	var placeholders []string
	var inject []Secret
	if p.cfg.Secrets != nil {
		for _, s := range p.cfg.Secrets.SecretsFor(sb.ID) {
			if cc.sni != "" && s.MatchesHost(host) {
				if s.Refuse != "" {
					reason := fmt.Sprintf("the header %s of a rule for %s cannot be set: %s", s.Header, host, s.Refuse)
					p.deny(sb, decisionlog.KindHTTP, host, dst, "header-rule", reason)
					refuse(w, http.StatusForbidden, "header-rule", reason)
					return
				}
				if s.Header != "" {
					inject = append(inject, s)
				}
				continue
			}
			if s.Placeholder != "" {
				placeholders = append(placeholders, s.Placeholder)
			}
		}
	}
	if len(inject) > 0 && isReflectingMethod(r.Method) {
		reason := fmt.Sprintf("%s echoes the request back; it is refused to %s, which gets a secret injected", textclip.Bytes(r.Method, maxEcho), host)
		p.deny(sb, decisionlog.KindHTTP, host, dst, "secret-method", reason)
		refuse(w, http.StatusForbidden, "secret-method", reason)
		return
	}
	for _, s := range inject {
		r.Header.Set(s.Header, s.Value)
	}
	if len(placeholders) > 0 {
		if _, found := placeholderIn(r, placeholders); found {
			reason := p.placeholderReason(cc, host)
			p.deny(sb, decisionlog.KindHTTP, host, dst, "secret-placeholder", reason)
			refuse(w, http.StatusForbidden, "secret-placeholder", reason)
			return
		}
	}
	st := &reqState{}
	if len(placeholders) > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = newBodyScanner(r.Body, placeholders, p.cfg.BodyScanBytes, func(ph string) {
			st.placeholder.Store(&ph)
			p.deny(sb, decisionlog.KindHTTP, host, dst, "secret-placeholder", p.placeholderReason(cc, host)+" (in the request body)")
		})
	}

	scheme, upHost := "http", net.JoinHostPort(host, strconv.Itoa(int(dst.Port())))
	if cc.sni != "" {
		scheme = "https"
	}
	if byAddr {
		upHost = dst.String()
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = upHost
			// pr.Out.Host stays the Host the sandbox sent.
		},
		Transport:     cc.transport,
		BufferPool:    p.bufs,
		FlushInterval: 50 * time.Millisecond,
		ErrorHandler:  p.upstreamError,
		ErrorLog:      p.srv.ErrorLog,
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqKey{}, st)))
}

// isReflectingMethod reports whether method echoes the request (headers included) back to the
// client.
func isReflectingMethod(method string) bool {
	return strings.EqualFold(method, http.MethodTrace) || strings.EqualFold(method, "TRACK")
}

// trackPlain tracks a cleartext connection under the host of its current request; at the
// sandbox's limit it answers 503 and closes the connection.
func (p *Proxy) trackPlain(w http.ResponseWriter, cc *clientConn, host string) bool {
	if cc.track(host) {
		return true
	}
	w.Header().Set("Connection", "close")
	refuse(w, http.StatusServiceUnavailable, "connection-limit", "the sandbox has too many open connections")
	return false
}

// bufferPool lends the reverse proxy copy buffers larger than its 32 KiB default, which
// halves the per-byte cost of large responses over HTTP/2.
type bufferPool struct{ p sync.Pool }

const copyBufSize = 256 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, copyBufSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufSize {
		buf = buf[:copyBufSize]
		b.p.Put(&buf)
	}
}

func (p *Proxy) placeholderReason(cc *clientConn, host string) string {
	if cc.sni == "" {
		return fmt.Sprintf("the request to %s carries a secret placeholder; secrets are injected over HTTPS only, never into cleartext HTTP", orAddr(host, cc))
	}
	return fmt.Sprintf("the request to %s carries the placeholder of a secret that does not belong to that host", host)
}

func orAddr(host string, cc *clientConn) string {
	if host != "" {
		return host
	}
	return cc.dst.String()
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if st, _ := r.Context().Value(reqKey{}).(*reqState); st != nil && st.placeholder.Load() != nil {
		refuse(w, http.StatusForbidden, "secret-placeholder", "the request body carries the placeholder of a secret that does not belong to this host")
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the sandbox went away
	}
	cc, _ := r.Context().Value(connKey{}).(*clientConn)
	if cc != nil && cc.sb != nil {
		p.log.Info("upstream request failed", "sandbox", cc.sb.ID, "host", r.Host, "err", err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = fmt.Fprintf(w, "airlock egress: upstream error: %v\n", err)
}

// refuse answers a request the proxy will not forward, naming the rule.
func refuse(w http.ResponseWriter, code int, rule, reason string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Airlock-Egress-Rule", rule)
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "airlock egress: refused by rule %q: %s\n", rule, reason)
}

// maxEcho is how many bytes of a host an answer or log quotes (textclip.Bytes).
const maxEcho = 100
