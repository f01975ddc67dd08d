package integration

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
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
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
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
	layerDigests := map[string]bool{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		layerDigests[d.String()] = true
	}
	var layerGets atomic.Int32
	pushing := true
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet && layerDigests[r.URL.Path[i+len("/blobs/"):]] {
			layerGets.Add(1)
		}
		if strings.HasPrefix(r.URL.Path, "/v2/private/") && !pushing {
			if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="airlock-test"`)
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"e2b/bb:v1", "private/bb:v1"} {
		ref, err := name.ParseReference(u.Host + "/" + repo)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithTransport(reg.Client().Transport), remote.WithAuth(authn.Anonymous)); err != nil {
			t.Fatal(err)
		}
	}
	pushing = false
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
