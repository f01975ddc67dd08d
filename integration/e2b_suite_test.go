package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// TestE2BSuite measures Airlock with E2B's own JS SDK test suite
// (packages/js-sdk/tests of an e2b-dev/E2B checkout, run from the SDK's
// sources with vitest). It runs only when AIRLOCK_E2B_SUITE names the
// checkout, with its npm packages in place: scripts/e2b-suite.sh does both
// (docs/e2b.md, "Measuring with E2B's own suite"). E2B's tests are never
// part of this repository.
//
// First the suite runs with nothing behind the SDK's addresses: the tests
// that pass then are unit tests (mocked or pure); the others need a
// backend. Then an `airlock server` on gVisor starts in the fake internet's
// host namespace (egress_harness_test.go; the names and addresses E2B's
// tests curl — connectivitycheck.gstatic.com, 1.1.1.1, 8.8.8.8 — are served
// there, nothing leaves the machine; Docker Hub and trusted certificates of
// public addresses are emulated too, e2b_suite_inet_test.go), with the
// Debian default template, and the suite runs once per mode:
//
//   - url: E2B_API_URL and E2B_SANDBOX_URL name the server (docs/e2b.md).
//   - domain: E2B_DOMAIN only. The SDK then calls https://api.<domain> and
//     https://<port>-<id>.<domain>; a TLS front (below) with a certificate
//     for <domain> and *.<domain> from a throwaway CA (NODE_EXTRA_CA_CERTS)
//     listens on 127.0.0.1:443 of the namespace and passes requests to the
//     server with their Host, and a preload script (NODE_OPTIONS=--import)
//     resolves <domain> and every name under it to 127.0.0.1 in Node's
//     dns.lookup, which Node's fetch (undici) uses for every connection: a
//     wildcard record, which /etc/hosts cannot hold.
//
// Each run's vitest JSON report is parsed into a table per file (written to
// AIRLOCK_E2B_SUITE_OUT as results.md, results-<mode>.json and the vitest
// logs). The test fails if the suite cannot run, or if a mode's backend
// tests pass below AIRLOCK_E2B_SUITE_MIN_PASS percent (of those not
// skipped; unset: no threshold).
func TestE2BSuite(t *testing.T) {
	if dir := os.Getenv("AIRLOCK_E2B_SUITE_REPORT"); dir != "" {
		suiteReport(t, dir)
		return
	}
	checkout := os.Getenv("AIRLOCK_E2B_SUITE")
	if checkout == "" {
		t.Skip("AIRLOCK_E2B_SUITE names no E2B checkout (scripts/e2b-suite.sh runs this test)")
	}
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	airtest.RequireBinary(t, "mmdebstrap")
	node, _ := requireNode(t, "E2B's SDK suite")
	sdk := filepath.Join(checkout, "packages", "js-sdk")
	vitest := filepath.Join(sdk, "node_modules", "vitest", "vitest.mjs")
	if _, err := os.Stat(vitest); err != nil {
		t.Fatalf("no vitest in %s (scripts/e2b-suite.sh installs it): %v", sdk, err)
	}
	modes := strings.Split(envOr("AIRLOCK_E2B_SUITE_MODES", "url,domain"), ",")
	for _, m := range modes {
		if m != "url" && m != "domain" {
			t.Fatalf("AIRLOCK_E2B_SUITE_MODES: %q is neither url nor domain", m)
		}
	}
	out := os.Getenv("AIRLOCK_E2B_SUITE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	minPass := 0.0
	if v := os.Getenv("AIRLOCK_E2B_SUITE_MIN_PASS"); v != "" {
		var err error
		if minPass, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("AIRLOCK_E2B_SUITE_MIN_PASS: %v", err)
		}
	}
	ctx := ctxFor(t, 150*time.Minute)
	sr := &suiteRunner{t: t, node: node, vitest: vitest, sdk: sdk, out: out,
		workers: envOr("AIRLOCK_E2B_SUITE_WORKERS", "2"), files: strings.Fields(os.Getenv("AIRLOCK_E2B_SUITE_FILES"))}
	sr.writeConfig()

	// 1. Without a backend: nothing listens on this namespace's 443, the
	// domain resolves to 127.0.0.1 (connections are refused at once).
	start := time.Now()
	noBackend := sr.run(ctx, "no-backend", nil, []string{
		"E2B_API_KEY=" + fakeE2BKey, "E2B_DOMAIN=" + e2bSuiteDomain,
		"NODE_OPTIONS=--import " + sr.preload, "AIRLOCK_E2B_SUITE_DOMAIN=" + e2bSuiteDomain,
	})
	backend := classify(noBackend)
	nb := 0
	for _, b := range backend {
		if b {
			nb++
		}
	}
	t.Logf("without a backend (%v): %d tests, %d need a backend", time.Since(start).Round(time.Second), len(noBackend), nb)

	// 2. The server, in the fake internet's host namespace.
	inet := newSuiteInternet(t)
	n := newFakenet(t, func(c *fakenet.Config) {
		c.ExtraAddrs = append(c.ExtraAddrs, e2bSuitePublicAddrs...)
		c.Zone.Set("connectivitycheck.gstatic.com", fakenet.Record{Addrs: []netip.Addr{sharedAddr}})
		inet.configure(t, c) // Docker Hub, the server's resolver (e2b_suite_inet_test.go)
	})
	cache, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	debian := fillRecipeCache(t, cache, recipe.Default(), t.TempDir())
	// No test of the JS SDK's suite uses the code-interpreter template (its
	// tests are in e2b-dev/code-interpreter): it is not built (a server's
	// store holds each of its steps' trees, gigabytes).
	s := newEgressServerWith(t, build(t), "runsc", n, func(s *server) { seedTemplates(t, cache, s, debian) },
		"--default-template", "debian", "--build-cache-dir", filepath.Join(cache, "recipe-cache-v1"), "--e2b-domain", e2bSuiteDomain)
	start = time.Now()
	if stdout, stderr, code := s.cli(ctx, "run", "--", "true"); code != 0 {
		t.Fatalf("wait for the default template: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
	}
	def, err := s.client().GetTemplate(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	inet.pushImages(ctx, t, filepath.Join(s.dataDir, "templates", "blobs", strings.Replace(def.Digest, ":", "-", 1), "rootfs"), n.CAPEM())
	trustFakeCA(ctx, t, s)
	t.Logf("templates ready in %v", time.Since(start).Round(time.Second))
	key := e2bKey(ctx, t, s, "admin") // E2B keys may build templates; Airlock asks an admin key for that

	var md strings.Builder
	fmt.Fprintf(&md, "E2B JS SDK suite (%s), Airlock on runsc, %s.\n\n", gitHead(checkout), time.Now().UTC().Format("2006-01-02"))
	for _, mode := range modes {
		env := []string{"E2B_API_KEY=" + key, "E2B_DOMAIN=" + e2bSuiteDomain}
		switch mode {
		case "url":
			env = append(env, "E2B_API_URL="+s.url, "E2B_SANDBOX_URL="+s.url)
		case "domain":
			caFile := sr.startFront(n, s.url)
			env = append(env, "NODE_EXTRA_CA_CERTS="+caFile, "NODE_OPTIONS=--import "+sr.preload,
				"AIRLOCK_E2B_SUITE_DOMAIN="+e2bSuiteDomain)
		}
		start := time.Now()
		run := sr.run(ctx, mode, n, env)
		rows, total := suiteTable(run, backend)
		writeSuiteTable(&md, mode, rows, total)
		fmt.Fprintf(&md, "(%s mode: %v.)\n\n", mode, time.Since(start).Round(time.Second))
		t.Logf("%s mode (%v): %d of %d backend tests pass, %d fail, %d skipped",
			mode, time.Since(start).Round(time.Second), total.Pass, total.Backend, total.Fail, total.Skip)
		deleteAllSandboxes(ctx, t, s)
		if ran := total.Backend - total.Skip; minPass > 0 && ran > 0 && 100*float64(total.Pass)/float64(ran) < minPass {
			t.Errorf("%s mode: %d of %d backend tests pass, below AIRLOCK_E2B_SUITE_MIN_PASS=%v %%", mode, total.Pass, ran, minPass)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results (also in %s):\n%s", filepath.Join(out, "results.md"), md.String())
}

// suiteReport writes dir/results.md again from the reports a run left there
// (results-no-backend.json and results-<mode>.json): AIRLOCK_E2B_SUITE_REPORT
// (scripts/e2b-suite.sh --report DIR).
func suiteReport(t *testing.T, dir string) {
	noBackend, err := readVitest(filepath.Join(dir, "results-no-backend.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	backend := classify(noBackend)
	var md strings.Builder
	for _, mode := range []string{"url", "domain"} {
		run, err := readVitest(filepath.Join(dir, "results-"+mode+".json"), "")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		rows, total := suiteTable(run, backend)
		writeSuiteTable(&md, mode, rows, total)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results (also in %s):\n%s", filepath.Join(dir, "results.md"), md.String())
}

// e2bSuiteDomain is E2B_DOMAIN in both modes and the server's --e2b-domain.
const e2bSuiteDomain = "e2b.airlock.test"

// fakeE2BKey is a key of E2B's form for the run without a backend.
const fakeE2BKey = "e2b_0000000000000000000000000000000000000000"

// e2bSuitePublicAddrs are the public addresses E2B's network tests curl
// (tests/sandbox/network.test.ts), served by the fake internet.
var e2bSuitePublicAddrs = []netip.Addr{netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("8.8.8.8")}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// gitHead names the checkout's commit ("unknown" outside git).
func gitHead(dir string) string {
	b, err := exec.Command("git", "-C", dir, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	return "e2b-dev/E2B@" + strings.TrimSpace(string(b))
}

// suiteRunner runs vitest over the SDK's tests.
type suiteRunner struct {
	t                         *testing.T
	node, vitest, sdk, out    string
	workers                   string
	files                     []string
	config, preload, frontDir string
}

// e2bSuiteConfig is the vitest configuration of the runs: E2B's own
// projects for Node (unit, template, connectionConfig: same files, setup,
// isolation and timeouts) without the browser project, whose Chromium
// driver the backend tests do not need, and without tests/bundle (it
// builds the SDK with tsdown).
const e2bSuiteConfig = `// Written by Airlock's TestE2BSuite; removed when it ends.
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['tests/**/*.test.ts'],
        exclude: ['tests/runtimes/**', 'tests/template/**', 'tests/connectionConfig.test.ts', 'tests/bundle/**'],
        isolate: true, globals: false, testTimeout: 30_000, environment: 'node', bail: 0,
        setupFiles: ['tests/globalFetchFallback.setup.ts'], server: {}, deps: { interopDefault: true } } },
      { test: { name: 'template', include: ['tests/template/**/*.test.ts'], globals: false,
        testTimeout: 180_000, environment: 'node', setupFiles: ['tests/globalFetchFallback.setup.ts'] } },
      { test: { name: 'connectionConfig', include: ['tests/connectionConfig.test.ts'], globals: false,
        isolate: true, testTimeout: 10_000, environment: 'node' } },
    ],
  },
})
`

// e2bSuitePreload makes Node resolve AIRLOCK_E2B_SUITE_DOMAIN and every
// name under it to 127.0.0.1 (the TLS front), as a wildcard DNS record
// would; other names resolve as usual. Node's net.connect, under fetch
// (undici) and every other client, looks names up through dns.lookup.
const e2bSuitePreload = `// Written by Airlock's TestE2BSuite.
import dns from 'node:dns'
const domain = process.env.AIRLOCK_E2B_SUITE_DOMAIN
const ours = (h) => typeof h === 'string' && !!domain && (h === domain || h.endsWith('.' + domain))
const answer = { address: '127.0.0.1', family: 4 }
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (!ours(host)) return lookup.apply(this, arguments)
  if (typeof opts === 'function') { cb = opts; opts = {} }
  if (typeof opts === 'number') opts = { family: opts }
  process.nextTick(() => (opts && opts.all ? cb(null, [answer]) : cb(null, answer.address, answer.family)))
}
const plookup = dns.promises.lookup
dns.promises.lookup = async function (host, opts) {
  if (!ours(host)) return plookup.apply(this, arguments)
  return opts && opts.all ? [answer] : answer
}
`

// writeConfig writes the vitest configuration into the SDK's directory
// (where 'vitest/config' resolves) and the preload script beside the test's
// files; both go when the test ends.
func (sr *suiteRunner) writeConfig() {
	t := sr.t
	sr.config = filepath.Join(sr.sdk, "vitest.airlock.config.mts")
	if err := os.WriteFile(sr.config, []byte(e2bSuiteConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sr.config) })
	dir := t.TempDir()
	sr.frontDir = dir
	sr.preload = filepath.Join(dir, "resolve.mjs")
	if err := os.WriteFile(sr.preload, []byte(e2bSuitePreload), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs vitest once (in the fake internet's host namespace when n is
// set, else in this test's own), its JSON report and log kept in the output
// directory, and returns the parsed tests. The run's own failures are the
// measurement, not the test's: only a run that leaves no report fails it.
func (sr *suiteRunner) run(ctx context.Context, name string, n *fakenet.Net, extraEnv []string) []suiteTest {
	t := sr.t
	report := filepath.Join(sr.out, "results-"+name+".json")
	os.Remove(report)
	logPath := filepath.Join(sr.out, "vitest-"+name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	args := []string{"nice", "-n", "19", sr.node, sr.vitest, "run", "--config", sr.config,
		"--reporter=json", "--reporter=default", "--outputFile.json=" + report, "--maxWorkers=" + sr.workers}
	args = append(args, sr.files...)
	var cmd *exec.Cmd
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	defer cancel()
	if n != nil {
		cmd = n.Command(runCtx, args[0], args[1:]...)
	} else {
		cmd = exec.CommandContext(runCtx, args[0], args[1:]...)
	}
	cmd.Dir = sr.sdk
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "NODE_OPTIONS=") && !strings.HasPrefix(kv, "NODE_EXTRA_CA_CERTS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "NO_COLOR=1"), extraEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// vitest's workers are its children: end the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // workers left behind
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run vitest (%s): %v", name, err)
	}
	tests, perr := readVitest(report, filepath.Join(sr.sdk, "tests"))
	if perr != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("vitest (%s) left no report (%v): %v\n%s", name, err, perr, tail(string(b), 60))
	}
	return tests
}

// startFront starts the domain mode's TLS front in n's host namespace,
// 127.0.0.1:443, in front of the server at serverURL, and returns the path
// of its CA certificate. It stops when the test ends.
func (sr *suiteRunner) startFront(n *fakenet.Net, serverURL string) string {
	t := sr.t
	cert, caPEM, err := wildcardCert(e2bSuiteDomain)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(sr.frontDir, "front-ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := n.HostTransport()
	t.Cleanup(tr.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the server routes <port>-<id>.<domain> by it
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: -1, // streams (commands, watchers) as they come
	}
	ln, err := n.ListenHost("tcp", "127.0.0.1:443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("TLS front: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return caFile
}

// wildcardCert makes a throwaway CA and a leaf for domain and *.domain.
func wildcardCert(domain string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Airlock E2B suite front CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "*." + domain},
		DNSNames:  []string{domain, "*." + domain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// deleteAllSandboxes deletes what a run left (a failed test may skip its
// kill), so that the next mode starts clean.
func deleteAllSandboxes(ctx context.Context, t *testing.T, s *server) {
	t.Helper()
	c := s.client()
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil {
		t.Fatalf("list sandboxes: %v", err)
	}
	var ids []model.SandboxID
	for _, sb := range list.Sandboxes {
		if sb.State == string(model.StateDeleting) || sb.State == string(model.StateDeleted) {
			continue
		}
		id := model.SandboxID(sb.ID)
		if _, err := c.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
			continue
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		s.waitState(ctx, id, model.StateDeleted)
	}
	if len(ids) > 0 {
		t.Logf("deleted %d sandboxes the run left", len(ids))
	}
}
