package deploytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// Versions of the binaries scripts/kube-binaries.sh builds; the default
// binaries directory is keyed by them.
const (
	kubeVersion = "v1.35.4"
	etcdVersion = "v3.6.16"
)

// binDir returns the directory holding etcd and kube-apiserver: $KUBE_BIN_DIR,
// else scripts/kube-binaries.sh's cache directory. Without them the test
// skips, except under CI (CI set), where it fails.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBE_BIN_DIR")
	if dir == "" {
		cache := os.Getenv("AIRLOCK_TEST_CACHE")
		if cache == "" {
			cache = "/var/cache/airlock-test"
		}
		dir = filepath.Join(cache, "kube-"+kubeVersion+"-etcd-"+etcdVersion)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			msg := fmt.Sprintf("no %s in %s (build them with ./scripts/kube-binaries.sh, then set KUBE_BIN_DIR to the directory it prints): %v", name, dir, err)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a started etcd or kube-apiserver; its output goes to a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it exited
	err  error         // its exit status, once done is closed
}

func start(t *testing.T, dir, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: filepath.Base(bin), log: filepath.Join(dir, filepath.Base(bin)+".log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Killed with the test binary, should it die without running Cleanup.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log (last 4 KiB):\n%s", p.name, tail(p.log, 4096))
		}
	})
	return p
}

// stop ends the process: SIGTERM, then SIGKILL after 10 seconds.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// warnings collects the API server's warnings (deprecated APIs, Pod Security
// and the like), which rest.Config reports to its WarningHandler.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// startCluster starts etcd and kube-apiserver on 127.0.0.1 (free ports, a
// temporary directory), waits until the API server is ready, and returns an
// admin client config. Both are stopped and removed at the test's end.
// No controller manager and no scheduler: the test only applies with dry run.
func startCluster(t *testing.T, w *warnings) *rest.Config {
	t.Helper()
	bin := binDir(t)
	dir := t.TempDir()

	clientPort, peerPort, securePort := freePort(t), freePort(t), freePort(t)
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd := start(t, dir, filepath.Join(bin, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn")

	// The service-account signing key and a static admin token.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	writeFile(t, saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	writeFile(t, saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(tok[:])
	tokens := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokens, []byte(token+",admin,admin-uid,system:masters\n"))

	api := start(t, dir, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+clientURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(securePort),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		// No controller manager: nothing would create the default
		// ServiceAccount or lift the not-ready taint.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--enable-priority-and-fairness=false")

	cfg := &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(securePort),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // its self-signed serving cert
		WarningHandler:  w,
		Timeout:         30 * time.Second,
		// client-go's default of 5 requests a second would make most of
		// the test's time waiting on its own rate limiter.
		QPS:   200,
		Burst: 400,
	}
	waitReady(t, cfg, etcd, api)
	return cfg
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitReady polls /readyz until it answers ok, for at most 90 seconds.
func waitReady(t *testing.T, cfg *rest.Config, procs ...*process) {
	t.Helper()
	c := *cfg
	c.Timeout = 2 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	client := dc.RESTClient()
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range procs {
			select {
			case <-p.done:
				t.Fatalf("%s exited before the API server was ready: %v\n%s", p.name, p.err, tail(p.log, 4096))
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		body, err := client.Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
			t.Logf("kube-apiserver ready after %v", time.Since(start).Round(10*time.Millisecond))
			return
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("kube-apiserver not ready after 90s: %v", last)
}
