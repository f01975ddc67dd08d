package integration

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockdev/airlock/internal/egress/fakenet"
)

// How TestE2BSuite's fake internet stands in for the public internet
// beyond the addresses E2B's network tests curl (test-only emulation):
//
//   - Docker Hub: a registry (go-containerregistry's, blobs on disk) served
//     over HTTPS with the fake internet's CA at the names Docker Hub uses
//     (index.docker.io, which go-containerregistry pulls docker.io images
//     from, and registry-1.docker.io), holding library/ubuntu:22.04. Its
//     content is the server's Debian default template exported as a
//     one-layer image: Debian content under the ubuntu name, enough for
//     what E2B's template tests run in it (a shell, coreutils, cat,
//     readlink). The server trusts the fake CA through SSL_CERT_FILE and
//     resolves the names through the fake internet's DNS, which also
//     answers at the address /etc/resolv.conf names (the server's own
//     lookups, not its sandboxes', use it).
//   - Certificates of public addresses: the server's template default is
//     pointed at the default's tree with the fake internet's CA added to
//     its system trust store (an image of the suite's registry, imported),
//     so that `curl https://1.1.1.1` in a sandbox verifies the fake
//     internet's certificate as it would a public one. Only the suite's
//     server, never the product's default template.

// dockerHubNames are the host names a docker.io pull may use.
var dockerHubNames = []string{"index.docker.io", "registry-1.docker.io"}

// suiteRegistryName serves the same registry under a name of the test's
// own, for the harness's own image (the default template with the CA).
const suiteRegistryName = "registry.airlock.test"

// suiteInternet is the suite's stand-in registry, made before the fake
// internet (its handler is one of the fake internet's sites) and filled
// once the server has its default template.
type suiteInternet struct {
	reg      http.Handler
	blobsDir string
}

func newSuiteInternet(t *testing.T) *suiteInternet {
	t.Helper()
	dir := t.TempDir()
	return &suiteInternet{blobsDir: dir,
		reg: registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))}
}

// configure adds the registry's sites and names, and the resolvers of
// /etc/resolv.conf, to the fake internet's configuration.
func (si *suiteInternet) configure(t *testing.T, c *fakenet.Config) {
	if c.Sites == nil {
		c.Sites = map[string]http.Handler{}
	}
	for _, n := range append([]string{suiteRegistryName}, dockerHubNames...) {
		c.Sites[n] = si.reg
		c.Zone.Set(n, fakenet.Record{Addrs: []netip.Addr{sharedAddr}})
	}
	c.ResolverAddrs = append(c.ResolverAddrs, resolverAddrs(t)...)
	// What the public resolvers' web servers answer at their bare address
	// (E2B's network tests check the status): Cloudflare redirects
	// https://1.1.1.1/ with 301, Google https://8.8.8.8/ with 302.
	c.Sites["1.1.1.1"] = http.RedirectHandler("https://one.one.one.one/", http.StatusMovedPermanently)
	c.Sites["8.8.8.8"] = http.RedirectHandler("https://dns.google/", http.StatusFound)
}

// resolverAddrs are the resolvers of /etc/resolv.conf the fake internet
// can answer at (not loopback ones: a process in H reaches its own
// loopback).
func resolverAddrs(t *testing.T) []netip.Addr {
	var out []netip.Addr
	for _, a := range resolvConfAddrs(t) {
		if a.IsLoopback() {
			t.Logf("resolver %s in /etc/resolv.conf is a loopback address: the server cannot reach the fake internet's names by it", a)
			continue
		}
		out = append(out, a)
	}
	return out
}

// resolvConfAddrs are the nameserver addresses of /etc/resolv.conf.
func resolvConfAddrs(t *testing.T) []netip.Addr {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		t.Logf("no /etc/resolv.conf: %v", err)
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// pushImages exports the template tree at rootfs as a one-layer image and
// pushes it as library/ubuntu:22.04, and the same with a layer adding the
// fake internet's CA to the system trust store as
// airlock/default-ca:1 (through a loopback listener on the same registry
// handler the fake internet serves).
func (si *suiteInternet) pushImages(ctx context.Context, t *testing.T, rootfs string, caPEM []byte) {
	t.Helper()
	start := time.Now()
	layerTar := filepath.Join(t.TempDir(), "ubuntu-layer.tar")
	cmd := exec.CommandContext(ctx, "nice", "-n", "19", "tar", "-C", rootfs, "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
		"--exclude=./.airlock/run/*", "-cf", layerTar, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar the default template's tree: %v\n%s", err, out)
	}
	defer os.Remove(layerTar)
	layer, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caLayer := tarLayer(t,
		[2]string{"etc/ssl/certs/ca-certificates.crt", string(append(bundle, caPEM...))},
		[2]string{"usr/local/share/ca-certificates/airlock-fakenet.crt", string(caPEM)})
	cfg := v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	srv := httptest.NewServer(si.reg)
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for repo, img := range map[string]v1.Image{
		"library/ubuntu:22.04": linuxImage(t, cfg, layer),
		"airlock/default-ca:1": linuxImage(t, cfg, layer, caLayer),
	} {
		ref, err := name.ParseReference(u.Host + "/" + repo)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			t.Fatalf("push %s to the suite's registry: %v", repo, err)
		}
	}
	t.Logf("docker.io/library/ubuntu:22.04 (the Debian default template's tree) and %s/airlock/default-ca:1 served in %v",
		suiteRegistryName, time.Since(start).Round(time.Second))
}

// trustFakeCA points the server's template default (E2B's base) at the
// default's tree with the fake internet's CA in its trust store, imported
// from the suite's registry. (Not a recipe step: a build sandbox's
// /etc/ssl/certs/ca-certificates.crt is the runtime's bind mount, and
// sandboxes get the template's bundle with Airlock's CA appended.)
func trustFakeCA(ctx context.Context, t *testing.T, s *server) {
	t.Helper()
	src := "docker://" + suiteRegistryName + "/airlock/default-ca:1"
	if stdout, stderr, code := s.cli(ctx, "template", "import", src, "--name", "default"); code != 0 {
		t.Fatalf("import the default template with the fake internet's CA: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
	}
}
