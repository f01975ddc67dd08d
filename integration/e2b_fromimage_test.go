package integration

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
	"github.com/airlockdev/airlock/internal/model"
)

// TestE2BTemplateFromRegistry: E2B's template build API pulls fromImage
// from a registry (TLS on loopback, its CA trusted by the server through
// SSL_CERT_FILE): the build runs its steps on the pulled image; a second
// build of the same image fetches no layer again; fromImageRegistry's
// credentials reach a registry that wants them, wrong ones and a missing
// image fail the build with the image named.
func TestE2BTemplateFromRegistry(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")

	img := busyboxImage(t, tarLayer(t, [2]string{"srv/greeting", "hello from the registry\n"}))
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	tr := newTestRegistry(t, img)
	reg := httptest.NewTLSServer(tr)
	t.Cleanup(reg.Close)
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr.push(t, reg.Client().Transport, u.Host)
	layerGets := &tr.layerGets
	ca := filepath.Join(shortTempDir(t), "registry-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: reg.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}

	s := newServer(t, build(t), serverConfig{runtime: "runc", env: []string{"SSL_CERT_FILE=" + ca}})
	s.start()
	ctx := ctxFor(t, 8*time.Minute)
	httpc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(httpc.CloseIdleConnections)
	e := e2bCaller{t: t, ctx: ctx, base: s.url, key: s.key, http: httpc}

	// build runs an E2B build of name from start and returns its final
	// status and reason.
	build := func(tplName string, start map[string]any) (string, string) {
		t.Helper()
		var rb struct{ TemplateID, BuildID string }
		e.ok("POST", "/v3/templates", map[string]any{"name": tplName}, 202, &rb)
		e.ok("POST", "/v2/templates/"+rb.TemplateID+"/builds/"+rb.BuildID, start, 202, nil)
		for {
			var st struct {
				Status string
				Reason *struct{ Message string }
				Logs   []string
			}
			e.ok("GET", "/templates/"+rb.TemplateID+"/builds/"+rb.BuildID+"/status", nil, 200, &st)
			switch st.Status {
			case "ready":
				return st.Status, ""
			case "error":
				if st.Reason == nil {
					t.Fatalf("%s: error without a reason", tplName)
				}
				return st.Status, st.Reason.Message
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: still %s", tplName, st.Status)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	steps := []map[string]any{{"type": "RUN", "args": []string{"cat /srv/greeting > /srv/copy", "root"}}}

	public := u.Host + "/e2b/bb:v1"
	if st, why := build("from-reg", map[string]any{"fromImage": public, "steps": steps}); st != "ready" {
		t.Fatalf("build from %s: %s %s\n%s", public, st, why, s.log.String())
	}
	if n := layerGets.Load(); n < int32(len(layers)) {
		t.Errorf("the first build fetched %d layers, want %d", n, len(layers))
	}
	native := s.client()
	sb := createSandbox(ctx, t, native, apiv1.CreateSandboxRequest{Template: "from-reg"})
	if r := execIn(ctx, t, native, model.SandboxID(sb.ID), "/bin/cat", "/srv/copy"); r.stdout != "hello from the registry\n" {
		t.Errorf("the built template's /srv/copy: %+v", r)
	}
	if _, err := native.DeleteSandbox(ctx, model.SandboxID(sb.ID)); err != nil {
		t.Errorf("delete %s: %v", sb.ID, err)
	}

	// The same image again: no layer is fetched.
	layerGets.Store(0)
	if st, why := build("from-reg-again", map[string]any{"fromImage": public, "steps": steps}); st != "ready" {
		t.Fatalf("second build: %s %s", st, why)
	}
	if n := layerGets.Load(); n != 0 {
		t.Errorf("the second build of the same image fetched %d layers, want 0", n)
	}

	// Who may pull: whoever may build (an admin key); a member's build
	// request is refused (403) before anything is stored or pulled.
	member := e2bKey(ctx, t, s, "member")
	layerGets.Store(0)
	e.fails("POST", "/v3/templates", member, map[string]any{"name": "from-reg-member"}, 403, "admin")
	if n := layerGets.Load(); n != 0 {
		t.Errorf("a member's refused build fetched %d layers", n)
	}

	private := u.Host + "/private/bb:v1"
	creds := func(user, pass string) map[string]any {
		return map[string]any{"type": "registry", "username": user, "password": pass}
	}
	for _, c := range []struct {
		what  string
		start map[string]any
		want  string // "" ready, else in the reason
	}{
		{"no credentials", map[string]any{"fromImage": private, "steps": steps}, "UNAUTHORIZED"},
		{"wrong password", map[string]any{"fromImage": private, "fromImageRegistry": creds("alice", "nope"), "steps": steps}, "credentials given"},
		{"right credentials", map[string]any{"fromImage": private, "fromImageRegistry": creds("alice", "s3cret"), "steps": steps}, ""},
		{"a missing image", map[string]any{"fromImage": u.Host + "/e2b/nope:v1", "steps": steps}, "answered 404"},
	} {
		st, why := build(fmt.Sprintf("from-reg-%d", time.Now().UnixNano()%1e6), c.start)
		switch {
		case c.want == "" && st != "ready":
			t.Errorf("%s: %s %s", c.what, st, why)
		case c.want != "" && (st != "error" || !strings.Contains(why, c.want) || !strings.Contains(why, "fromImage "+c.start["fromImage"].(string))):
			t.Errorf("%s: %s %q, want an error naming the image and %s", c.what, st, why, c.want)
		}
	}
	if strings.Contains(s.log.String(), "s3cret") {
		t.Errorf("the server logged the registry password")
	}
}

// testRegistry is go-containerregistry's registry holding img as
// e2b/bb:v1 and private/bb:v1, the latter read only with alice's basic
// credentials (s3cret); it counts the GETs of img's layers.
type testRegistry struct {
	img       v1.Image
	inner     http.Handler
	layers    map[string]bool
	pushing   atomic.Bool
	layerGets atomic.Int32
}

func newTestRegistry(t *testing.T, img v1.Image) *testRegistry {
	t.Helper()
	r := &testRegistry{img: img, inner: registry.New(registry.Logger(log.New(io.Discard, "", 0))), layers: map[string]bool{}}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		r.layers[d.String()] = true
	}
	return r
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if i := strings.LastIndex(req.URL.Path, "/blobs/"); i >= 0 && req.Method == http.MethodGet && r.layers[req.URL.Path[i+len("/blobs/"):]] {
		r.layerGets.Add(1)
	}
	if strings.HasPrefix(req.URL.Path, "/v2/private/") && !r.pushing.Load() {
		if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="airlock-test"`)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
	}
	r.inner.ServeHTTP(w, req)
}

// push writes the image to the registry, reached at host through tr.
func (r *testRegistry) push(t *testing.T, tr http.RoundTripper, host string) {
	t.Helper()
	r.pushing.Store(true)
	defer r.pushing.Store(false)
	for _, repo := range []string{"e2b/bb:v1", "private/bb:v1"} {
		ref, err := name.ParseReference(host + "/" + repo)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, r.img, remote.WithTransport(tr), remote.WithAuth(authn.Anonymous)); err != nil {
			t.Fatal(err)
		}
	}
}

// sdkRegistryName is the registry's name in TestE2BSDK's fake internet.
const sdkRegistryName = "registry.airlock.test"

// sdkRegistry makes the registry parity-registry.mjs pulls from in
// TestE2BSDK's fake internet (HTTPS at sdkRegistryName with the fake
// internet's CA, which the server trusts; the fake DNS also at
// /etc/resolv.conf's resolver, for the server's own lookups), and the
// script's environment.
func sdkRegistry(t *testing.T) (func(*fakenet.Config), []string) {
	t.Helper()
	// The SDK runs commands as /bin/bash -l -c CMD: busybox's sh stands in.
	r := newTestRegistry(t, busyboxImage(t, tarLayer(t, [2]string{"srv/greeting", "hello from the registry\n"},
		[2]string{"bin/bash", "#!/bin/sh\nexec /bin/sh \"$@\"\n"})))
	local := httptest.NewServer(r)
	defer local.Close()
	u, err := url.Parse(local.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.push(t, local.Client().Transport, u.Host)
	opt := func(c *fakenet.Config) {
		if c.Sites == nil {
			c.Sites = map[string]http.Handler{}
		}
		c.Sites[sdkRegistryName] = r
		c.Zone.Set(sdkRegistryName, fakenet.Record{Addrs: []netip.Addr{sharedAddr}})
		c.ResolverAddrs = append(c.ResolverAddrs, resolverAddrs(t)...)
	}
	return opt, []string{
		"PARITY_REGISTRY_IMAGE=" + sdkRegistryName + "/e2b/bb:v1",
		"PARITY_REGISTRY_PRIVATE=" + sdkRegistryName + "/private/bb:v1",
		"PARITY_REGISTRY_USER=alice", "PARITY_REGISTRY_PASSWORD=s3cret",
	}
}
