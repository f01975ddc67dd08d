package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/binpath"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// Targets of `airlock bench egress` (issue 8).
const (
	EgressTargetExemptAdded    = 2 * time.Millisecond
	EgressTargetInterceptAdded = 5 * time.Millisecond
	EgressTargetMBps           = 300
)

// EgressOptions configure RunEgress.
type EgressOptions struct {
	// Runtime is the server's --runtime (default runc: on runsc the
	// sandbox's own user-space network stack adds its cost to the proxy's).
	Runtime       string
	Runs          int    // new connections per subject (default 200)
	Rounds        int    // the runs are split into rounds, subjects in random order per round (default 5)
	DownloadBytes int64  // the large download (default 1 GiB)
	AirlockBinary string // the airlock run as the server (default: binpath.Find("airlock"))
	ProbeBinary   string // the static airlock-bench whose `egress probe` runs in the fake host namespace and in the sandbox (default: this executable)
	AgentBinary   string // required
	TempDir       string // default os.TempDir()
	Progress      io.Writer
	ServerLog     io.Writer // the server's output; nil discards it
}

// EgressSubject is one way of opening new HTTPS connections.
type EgressSubject struct {
	Name    string `json:"name"`
	Method  string `json:"method"`
	Connect Stats  `json:"connect"`
	// Added is this subject's p50/p95 minus the direct connection's.
	AddedP50 time.Duration `json:"-"`
	AddedP95 time.Duration `json:"-"`
}

// MarshalJSON adds the added latencies in milliseconds.
func (s EgressSubject) MarshalJSON() ([]byte, error) {
	type plain EgressSubject
	return json.Marshal(struct {
		plain
		AddedP50ms float64 `json:"added_p50_ms"`
		AddedP95ms float64 `json:"added_p95_ms"`
	}{plain(s), millis(s.AddedP50), millis(s.AddedP95)})
}

// EgressDownload is one large download.
type EgressDownload struct {
	Name    string        `json:"name"`
	Bytes   int64         `json:"bytes"`
	Elapsed time.Duration `json:"-"`
	MBps    float64       `json:"mb_per_s"` // 10^6 bytes per second
}

// EgressReport is the result of RunEgress.
type EgressReport struct {
	StartedAt time.Time        `json:"started_at"`
	Runtime   string           `json:"runtime"`
	Runs      int              `json:"runs"`
	Subjects  []EgressSubject  `json:"subjects"`
	Downloads []EgressDownload `json:"downloads"`
	// Met says whether each target was met.
	Met map[string]bool `json:"targets_met"`
}

// Names of the fake internet the benchmark uses (all on one address).
const (
	egressDirectName    = "direct.bench.example"
	egressExemptName    = "exempt.bench.example"
	egressInterceptName = "intercept.bench.example"
)

var egressBenchAddr = netip.MustParseAddr("192.0.2.10")

// RunEgress runs `airlock bench egress`: in a fake internet of network
// namespaces this process makes (internal/egress/fakenet), an airlock server
// in the fake host namespace and one sandbox; the time to open a new HTTPS
// connection and get a small answer (dial, TLS handshake, GET, whole
// answer) directly from the host namespace, from the sandbox through the
// proxy without interception (a tls_exempt name) and with interception
// (cached leaf: the first connections warm it), p50/p95 and the added
// latency over direct; and one large download through the proxy over HTTP
// and over intercepted HTTPS. Needs root. Everything it creates is removed
// when it returns.
func RunEgress(ctx context.Context, opts EgressOptions) (rep EgressReport, err error) {
	if err := opts.check(); err != nil {
		return rep, err
	}
	rep = EgressReport{StartedAt: time.Now().UTC(), Runtime: opts.Runtime, Runs: opts.Runs}
	e := &egressBench{opts: opts}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cerr := e.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: clean up: %w", cerr))
		}
	}()
	if err := e.setup(ctx); err != nil {
		return rep, err
	}
	return e.measure(ctx, rep)
}

func (o *EgressOptions) check() error {
	if o.Runtime == "" {
		o.Runtime = "runc"
	}
	if o.Runs == 0 {
		o.Runs = 200
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.Runs < 1 || o.Rounds < 1 {
		return fmt.Errorf("bench: runs (%d) and rounds (%d) must be at least 1", o.Runs, o.Rounds)
	}
	o.Rounds = min(o.Rounds, o.Runs)
	if o.DownloadBytes == 0 {
		o.DownloadBytes = 1 << 30
	}
	if o.DownloadBytes < 0 {
		return fmt.Errorf("bench: download size must be positive, not %d", o.DownloadBytes)
	}
	if o.AirlockBinary == "" {
		p, err := binpath.Find("airlock")
		if err != nil {
			return fmt.Errorf("bench: the airlock binary runs the server: %w", err)
		}
		o.AirlockBinary = p
	}
	if o.ProbeBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find the probe binary (airlock-bench): %w", err)
		}
		o.ProbeBinary = exe
	}
	return checkServerHost(o.AgentBinary, &o.TempDir, &o.Progress, &o.ServerLog)
}

// egressBench is one RunEgress in progress.
type egressBench struct {
	opts   EgressOptions
	net    *fakenet.Net
	tmp    string
	server *exec.Cmd
	exited chan struct{}
	url    string
	key    string
	http   *http.Client
	c      *client.Client
	sb     model.SandboxID
}

func (e *egressBench) progressf(format string, args ...any) {
	fmt.Fprintf(e.opts.Progress, "bench egress: "+format+"\n", args...)
}

func (e *egressBench) setup(ctx context.Context) error {
	zone := fakenet.NewZone(nil)
	for _, n := range []string{egressDirectName, egressExemptName, egressInterceptName} {
		zone.Set(n, fakenet.Record{Addrs: []netip.Addr{egressBenchAddr}, TTL: 5 * time.Minute})
	}
	var err error
	if e.net, err = fakenet.New(fakenet.Config{Zone: zone}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if e.tmp, err = os.MkdirTemp(e.opts.TempDir, "albe-"); err != nil {
		return fmt.Errorf("bench: temporary directory: %w", err)
	}
	// Searchable by others: runc sandboxes' roots are unprivileged host users.
	if err := os.Chmod(e.tmp, 0o711); err != nil {
		return err
	}
	e.progressf("working directory %s (removed on exit)", e.tmp)
	if err := e.startServer(ctx); err != nil {
		return err
	}
	e.progressf("server up at %s in the fake host namespace; creating the sandbox", e.url)
	res, err := e.c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Egress: &apiv1.EgressPolicy{TLSExempt: []string{egressExemptName}}})
	if err != nil {
		return fmt.Errorf("bench: create sandbox: %w", err)
	}
	e.sb = model.SandboxID(res.Sandbox.ID)
	op, err := e.c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	if err != nil {
		return fmt.Errorf("bench: create sandbox: %w", err)
	}
	if op.State != string(model.OpSucceeded) {
		return fmt.Errorf("bench: create sandbox: %s: %+v", op.State, op.Error)
	}
	f, err := os.Open(e.opts.ProbeBinary)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := e.c.Upload(ctx, e.sb, "/tmp/airlock-probe", 0o755, f); err != nil {
		return fmt.Errorf("bench: copy the probe into the sandbox: %w", err)
	}
	return nil
}

// startServer runs `airlock server` in the fake host namespace, its
// upstream DNS the fake internet's, its proxy trusting the fake CA.
func (e *egressBench) startServer(ctx context.Context) error {
	ca := filepath.Join(e.tmp, "fakenet-ca.pem")
	if err := e.net.WriteCA(ca); err != nil {
		return err
	}
	dataDir := filepath.Join(e.tmp, "d")
	if err := os.Mkdir(dataDir, 0o711); err != nil {
		return err
	}
	// Not bound to ctx: cleanup stops it gracefully.
	cmd := e.net.Command(context.WithoutCancel(ctx), e.opts.AirlockBinary, "server",
		"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--agent-binary", e.opts.AgentBinary,
		"--runtime", e.opts.Runtime, "--default-template", "minimal",
		"--egress-upstream-dns", netip.AddrPortFrom(fakenet.DNSAddr, 53).String(), "--egress-default", "public")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+ca)
	cmd.Stdout, cmd.Stderr = e.opts.ServerLog, e.opts.ServerLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start airlock server: %w", err)
	}
	e.server, e.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(e.exited) }()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for {
		b, err := os.ReadFile(filepath.Join(dataDir, "server.url"))
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			e.url = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-e.exited:
			return errors.New("bench: airlock server exited during start-up (see its log with --log-level)")
		case <-deadline.C:
			return errors.New("bench: airlock server did not start within 2 minutes")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		return fmt.Errorf("bench: admin key: %w", err)
	}
	e.key = strings.TrimSpace(string(key))
	e.http = &http.Client{Transport: e.net.HostTransport()}
	e.c, err = client.New(e.url, e.key, client.WithHTTPClient(e.http))
	return err
}

// egressCase is one subject: where its probe runs and what it asks.
type egressCase struct {
	subject EgressSubject
	cfg     EgressProbeConfig
	inGuest bool
}

func (e *egressBench) measure(ctx context.Context, rep EgressReport) (EgressReport, error) {
	cases := []*egressCase{
		{subject: EgressSubject{Name: "direct", Method: "from the host namespace straight to the fake server (no proxy, no sandbox)"},
			cfg: EgressProbeConfig{Name: egressDirectName, Port: 443}},
		{subject: EgressSubject{Name: "proxy, exempt", Method: "from the sandbox through the proxy, relayed without interception (tls_exempt)"},
			cfg: EgressProbeConfig{Name: egressExemptName, Port: 443}, inGuest: true},
		{subject: EgressSubject{Name: "proxy, intercepted", Method: "from the sandbox through the proxy, TLS terminated with a cached leaf"},
			cfg: EgressProbeConfig{Name: egressInterceptName, Port: 443}, inGuest: true},
	}
	samples := make([][]time.Duration, len(cases))
	// Warm up: DNS bindings, the cached leaf, the probe binary's pages.
	for _, c := range cases {
		cfg := c.cfg
		cfg.Runs = 3
		if _, err := e.probe(ctx, c.inGuest, cfg); err != nil {
			return rep, fmt.Errorf("bench: warm-up of %s: %w", c.subject.Name, err)
		}
	}
	per := (e.opts.Runs + e.opts.Rounds - 1) / e.opts.Rounds
	for round := range e.opts.Rounds {
		order := rand.Perm(len(cases))
		for _, i := range order {
			c := cases[i]
			cfg := c.cfg
			cfg.Runs = min(per, e.opts.Runs-len(samples[i]))
			if cfg.Runs <= 0 {
				continue
			}
			res, err := e.probe(ctx, c.inGuest, cfg)
			if err != nil {
				return rep, fmt.Errorf("bench: %s: %w", c.subject.Name, err)
			}
			for _, ns := range res.ConnectNs {
				samples[i] = append(samples[i], time.Duration(ns))
			}
		}
		e.progressf("round %d/%d done", round+1, e.opts.Rounds)
	}
	for i, c := range cases {
		c.subject.Connect = Summarize(samples[i])
	}
	direct := cases[0].subject.Connect
	for _, c := range cases {
		c.subject.AddedP50 = c.subject.Connect.P50 - direct.P50
		c.subject.AddedP95 = c.subject.Connect.P95 - direct.P95
		rep.Subjects = append(rep.Subjects, c.subject)
	}
	for _, d := range []struct {
		name    string
		cfg     EgressProbeConfig
		inGuest bool
	}{
		{"direct, HTTP", EgressProbeConfig{Name: egressDirectName, Port: 80}, false},
		{"proxy, HTTP", EgressProbeConfig{Name: egressInterceptName, Port: 80}, true},
		{"proxy, HTTPS intercepted", EgressProbeConfig{Name: egressInterceptName, Port: 443}, true},
	} {
		cfg := d.cfg
		cfg.Download = e.opts.DownloadBytes
		e.progressf("download of %d bytes: %s", cfg.Download, d.name)
		res, err := e.probe(ctx, d.inGuest, cfg)
		if err != nil {
			return rep, fmt.Errorf("bench: download %s: %w", d.name, err)
		}
		el := time.Duration(res.DownloadNs)
		rep.Downloads = append(rep.Downloads, EgressDownload{Name: d.name, Bytes: res.DownloadBytes, Elapsed: el,
			MBps: float64(res.DownloadBytes) / el.Seconds() / 1e6})
	}
	rep.Met = map[string]bool{
		"exempt_added_p50_le_2ms":               rep.Subjects[1].AddedP50 <= EgressTargetExemptAdded,
		"intercept_added_p50_le_5ms":            rep.Subjects[2].AddedP50 <= EgressTargetInterceptAdded,
		"proxy_http_download_ge_300MBps":        rep.Downloads[1].MBps >= EgressTargetMBps,
		"proxy_intercepted_download_ge_300MBps": rep.Downloads[2].MBps >= EgressTargetMBps,
	}
	return rep, nil
}

// probe runs one probe in this process (inside the fake host namespace)
// or in the sandbox (the hidden `airlock-bench egress probe`).
func (e *egressBench) probe(ctx context.Context, inGuest bool, cfg EgressProbeConfig) (EgressProbeResult, error) {
	args := []string{"egress", "probe", "--name", cfg.Name,
		"--port", strconv.Itoa(cfg.Port), "--runs", strconv.Itoa(cfg.Runs), "--download", strconv.FormatInt(cfg.Download, 10)}
	var out bytes.Buffer
	if !inGuest {
		// The same probe binary, in the fake host namespace, asking the
		// fake internet's DNS server directly.
		cmd := e.net.Command(ctx, e.opts.ProbeBinary, append(args, "--dns", netip.AddrPortFrom(fakenet.DNSAddr, 53).String())...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return EgressProbeResult{}, fmt.Errorf("direct probe: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return decodeProbe(out.Bytes())
	}
	if err := e.run(ctx, append([]string{"/tmp/airlock-probe"}, args...), &out); err != nil {
		return EgressProbeResult{}, err
	}
	return decodeProbe(out.Bytes())
}

func decodeProbe(out []byte) (EgressProbeResult, error) {
	var res EgressProbeResult
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("probe output %q: %w", out, err)
	}
	return res, nil
}

// run runs args in the sandbox, its stdout to w; it fails unless the
// command exits with 0.
func (e *egressBench) run(ctx context.Context, args []string, w io.Writer) error {
	cs, err := e.c.CreateCommand(ctx, e.sb, apiv1.CreateCommandRequest{Args: args})
	if err != nil {
		return err
	}
	return attachUntilExit(ctx, e.c, cs, w)
}

// cleanup deletes the sandbox, stops the server, removes the working
// directory and tears the fake internet down.
func (e *egressBench) cleanup(ctx context.Context) error {
	var errs []error
	if e.c != nil && e.sb != "" {
		if _, err := e.c.DeleteSandbox(ctx, e.sb); err != nil {
			errs = append(errs, fmt.Errorf("delete sandbox: %w", err))
		} else {
			for {
				sb, err := e.c.GetSandbox(ctx, e.sb)
				if err != nil || sb.State == string(model.StateDeleted) {
					break
				}
				select {
				case <-ctx.Done():
					errs = append(errs, fmt.Errorf("sandbox %s not deleted: %w", e.sb, ctx.Err()))
				case <-time.After(100 * time.Millisecond):
					continue
				}
				break
			}
		}
	}
	if e.server != nil {
		_ = e.server.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-e.server.Process.Pid, syscall.SIGKILL)
			<-e.exited
			errs = append(errs, errors.New("airlock server did not stop within 30s; killed"))
		}
	}
	if e.http != nil {
		e.http.CloseIdleConnections()
	}
	if e.tmp != "" {
		mounts, err := rootfs.MountsUnder(e.tmp)
		if err != nil {
			errs = append(errs, err)
		}
		for _, m := range mounts {
			if err := rootfs.Unmount(ctx, slog.New(slog.DiscardHandler), m); err != nil {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(e.tmp); err != nil {
			errs = append(errs, err)
		}
	}
	if e.net != nil {
		errs = append(errs, e.net.Close())
	}
	return errors.Join(errs...)
}

// WriteJSON writes the report as indented JSON.
func (r EgressReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r EgressReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "egress: new HTTPS connection (dial, TLS, GET, answer), %d runs each, airlock on %s\n", r.Runs, r.Runtime)
	fmt.Fprintln(tw, "SUBJECT\tP50\tP95\tADDED P50\tADDED P95\tTARGET")
	targets := []string{"", "≤ 2 ms added", "≤ 5 ms added"}
	for i, s := range r.Subjects {
		fmt.Fprintf(tw, "%s\t%.3f ms\t%.3f ms\t%+.3f ms\t%+.3f ms\t%s\n", s.Name, millis(s.Connect.P50), millis(s.Connect.P95),
			millis(s.AddedP50), millis(s.AddedP95), targets[min(i, len(targets)-1)])
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "DOWNLOAD\tBYTES\tSECONDS\tMB/S\tTARGET")
	for i, d := range r.Downloads {
		target := ""
		if i > 0 {
			target = "≥ 300 MB/s"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\n", d.Name, d.Bytes, d.Elapsed.Seconds(), d.MBps, target)
	}
	fmt.Fprintln(tw)
	for _, k := range []string{"exempt_added_p50_le_2ms", "intercept_added_p50_le_5ms", "proxy_http_download_ge_300MBps", "proxy_intercepted_download_ge_300MBps"} {
		fmt.Fprintf(tw, "target %s\t%v\n", k, r.Met[k])
	}
	return tw.Flush()
}
