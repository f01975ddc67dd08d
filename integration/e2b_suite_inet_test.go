package integration

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
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
//   - Certificates of public addresses: the server's default template gets
//     the fake internet's CA in its system trust store (a recipe on it:
//     update-ca-certificates), so that `curl https://1.1.1.1` in a sandbox
//     verifies the fake internet's certificate as it would a public one.
//     Only the suite's server, never the product's default template.

// dockerHubNames are the host names a docker.io pull may use.
var dockerHubNames = []string{"index.docker.io", "registry-1.docker.io"}

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
	for _, n := range dockerHubNames {
		c.Sites[n] = si.reg
		c.Zone.Set(n, fakenet.Record{Addrs: []netip.Addr{sharedAddr}})
	}
	c.ResolverAddrs = append(c.ResolverAddrs, resolverAddrs(t)...)
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

// pushUbuntu exports the template tree at rootfs as a one-layer image and
// pushes it as library/ubuntu:22.04 (through a loopback listener on the
// same registry handler the fake internet serves).
func (si *suiteInternet) pushUbuntu(ctx context.Context, t *testing.T, rootfs string) {
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
	img := linuxImage(t, v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"/bin/bash"}}, layer)
	srv := httptest.NewServer(si.reg)
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(u.Host + "/library/ubuntu:22.04")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push ubuntu:22.04 to the suite's registry: %v", err)
	}
	d, _ := img.Digest()
	t.Logf("docker.io/library/ubuntu:22.04 (%s: the Debian default template's tree) served in %v", d, time.Since(start).Round(time.Second))
}

// suiteCARecipe puts the fake internet's CA (its PEM lines, indented, in
// place of the verb) in the system trust store of the default template:
// one run step (each step copies the tree).
const suiteCARecipe = `from: {template: default}
steps:
  - run: |
      cat > /usr/local/share/ca-certificates/airlock-fakenet.crt <<'PEM'
%s      PEM
      update-ca-certificates
`

// trustFakeCA rebuilds the server's default template with the fake
// internet's CA trusted (named default: E2B's base).
func trustFakeCA(ctx context.Context, t *testing.T, s *server, n *fakenet.Net) {
	t.Helper()
	dir := t.TempDir()
	var pemLines strings.Builder
	for _, l := range strings.SplitAfter(string(n.CAPEM()), "\n") {
		if l != "" {
			pemLines.WriteString("      " + l)
		}
	}
	recipeText := fmt.Sprintf(suiteCARecipe, pemLines.String())
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipeText), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := s.cli(ctx, "template", "build", "-f", filepath.Join(dir, "recipe.yaml"), "--name", "default"); code != 0 {
		t.Fatalf("build the default template with the fake internet's CA: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
	}
}
