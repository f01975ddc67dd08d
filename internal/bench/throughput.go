package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// DefaultThroughputBytes is what `airlock bench throughput` moves per
// transfer by default.
const DefaultThroughputBytes = 1 << 30

// throughputTimeout bounds one transfer and its check.
const throughputTimeout = 10 * time.Minute

// throughputCase is one subject in one direction.
type throughputCase struct {
	row ThroughputRow
	// run does one transfer, checks it byte for byte, and returns the
	// timed part.
	run func(ctx context.Context) (time.Duration, error)
}

// RunThroughput runs `airlock bench throughput`: n bytes through stdout
// (SSE), stdin (the data plane's stdin route) and file upload/download for
// Airlock on each runtime, and through `RUNTIME exec` pipes for each raw
// peer, with the peak RSS growth of this process. It needs root;
// everything it creates is removed.
func RunThroughput(ctx context.Context, cfg Config, n int64) (ThroughputReport, error) {
	if n < 1 {
		return ThroughputReport{}, fmt.Errorf("bench: bytes must be at least 1, not %d", n)
	}
	return runWith(ctx, cfg, func(b *benchmark, ctx context.Context) (ThroughputReport, error) {
		return b.runThroughput(ctx, n)
	})
}

func (b *benchmark) runThroughput(ctx context.Context, n int64) (ThroughputReport, error) {
	started := time.Now().UTC()
	b.progressf("hashing the %s test pattern…", formatBytes(n))
	data := newPayload(n)
	first, err := b.startServers(ctx)
	if err != nil {
		return ThroughputReport{}, err
	}
	_, lower, err := b.templateTree(ctx, first)
	if err != nil {
		return ThroughputReport{}, err
	}
	var cases []throughputCase
	req := apiv1.CreateSandboxRequest{MemoryMiB: throughputMemoryMiB(n)}
	airlockReady := func(e *execAirlock) error {
		cs, err := airlockThroughputCases(ctx, e, data)
		cases = append(cases, cs...)
		return err
	}
	peerReady := func(e *execPeer) { cases = append(cases, peerThroughputCases(e, data)...) }
	if err := b.setupExecSubjects(ctx, lower, req, airlockReady, peerReady); err != nil {
		return ThroughputReport{}, err
	}
	b.skipped = append(b.skipped, Skipped{Name: "raw file transfers", Reason: "no raw peer: a runtime has no file API"})

	seed := b.seed()
	times, peaks, err := b.throughputRounds(ctx, seed, cases, n)
	if err != nil {
		return ThroughputReport{}, err
	}
	rep := ThroughputReport{
		Benchmark: "airlock bench throughput: MB/s of moving N bytes through stdout, stdin and files, each transfer checked by length and SHA-256",
		StartedAt: started,
		Bytes:     n,
		Runs:      b.cfg.Runs,
		Warmup:    b.cfg.Warmup,
		Seed:      seed,
		Memory: "the largest growth of this process's peak RSS (VmHWM, reset before each transfer) over its RSS before it; " +
			"the airlock servers run in this process too, so this is the client's and the server's together",
		Host:    hostFacts(ctx, b.cg, b.binaries, b.cfg.Version),
		Skipped: b.skipped,
	}
	for i, c := range cases {
		rep.Rows = append(rep.Rows, newThroughputRow(c.row, n, times[i], peaks[i]))
	}
	return rep, nil
}

// throughputMemoryMiB is the memory of a throughput sandbox: the default
// 512 MiB plus room for three copies of the data (the download's file, an
// upload's temporary file and the file it replaces), since under runsc a
// sandbox's files live in its memory.
func throughputMemoryMiB(n int64) int {
	mib := 512 + 3*((n+(1<<20)-1)>>20)
	return int(min(mib, model.MaxMemoryMiB))
}

// throughputRounds runs every case once per round, in a new random order.
func (b *benchmark) throughputRounds(ctx context.Context, seed uint64, cases []throughputCase, n int64) ([][]time.Duration, [][]int64, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	times := make([][]time.Duration, len(cases))
	peaks := make([][]int64, len(cases))
	total := b.cfg.Warmup + b.cfg.Runs
	for round := 1; round <= total; round++ {
		warm := round <= b.cfg.Warmup
		var line []string
		for _, i := range rng.Perm(len(cases)) {
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("bench: interrupted: %w", context.Cause(ctx))
			}
			c := cases[i]
			name := c.row.Subject + " " + c.row.Direction
			debug.FreeOSMemory() // start from a small RSS
			rss0, err := resetPeakRSS()
			if err != nil {
				return nil, nil, fmt.Errorf("bench: %w", err)
			}
			tctx, cancel := context.WithTimeout(ctx, throughputTimeout)
			d, err := c.run(tctx)
			cancel()
			if err != nil {
				return nil, nil, fmt.Errorf("bench: %s, round %d: %w", name, round, err)
			}
			peak, err := peakRSS()
			if err != nil {
				return nil, nil, fmt.Errorf("bench: %w", err)
			}
			if !warm {
				times[i] = append(times[i], d)
				peaks[i] = append(peaks[i], max(peak-rss0, 0))
			}
			line = append(line, fmt.Sprintf("%s %.0f MB/s", name, MBps(n, d)))
		}
		label := fmt.Sprintf("%d/%d", round-b.cfg.Warmup, b.cfg.Runs)
		if warm {
			label = fmt.Sprintf("warm-up %d/%d", round, b.cfg.Warmup)
		}
		b.progressf("[%s] %s", label, strings.Join(line, ", "))
	}
	return times, peaks, nil
}

// payload is the data of a transfer: n bytes of a 1 MiB pseudo-random
// block repeated (and n zero bytes for stdout, which comes from
// /dev/zero), with their SHA-256 sums.
type payload struct {
	n        int64
	block    []byte
	sum      string // of the pattern
	zerosSum string // of n zero bytes
}

func newPayload(n int64) payload {
	block := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{'a', 'i', 'r', 'l', 'o', 'c', 'k'})
	_, _ = rng.Read(block)
	p := payload{n: n, block: block}
	h := sha256.New()
	_, _ = io.Copy(h, p.reader())
	p.sum = hex.EncodeToString(h.Sum(nil))
	h.Reset()
	_, _ = io.Copy(h, io.LimitReader(zeroReader{}, n))
	p.zerosSum = hex.EncodeToString(h.Sum(nil))
	return p
}

// reader returns the n pattern bytes.
func (p payload) reader() io.Reader { return &patternReader{block: p.block, left: p.n} }

type patternReader struct {
	block []byte
	off   int
	left  int64
}

func (r *patternReader) Read(b []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > r.left {
		b = b[:r.left]
	}
	n := 0
	for n < len(b) {
		c := copy(b[n:], r.block[r.off:])
		n += c
		r.off = (r.off + c) % len(r.block)
	}
	r.left -= int64(n)
	return n, nil
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// hashCounter hashes and counts what is written to it.
type hashCounter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashCounter() *hashCounter { return &hashCounter{h: sha256.New()} }

func (c *hashCounter) Write(b []byte) (int, error) {
	c.n += int64(len(b))
	return c.h.Write(b)
}

// check compares what was received with what was expected.
func (c *hashCounter) check(n int64, sum string) error {
	got := hex.EncodeToString(c.h.Sum(nil))
	if c.n != n || got != sum {
		return fmt.Errorf("received %d bytes with SHA-256 %s, want %d bytes with %s", c.n, got, n, sum)
	}
	return nil
}

// parseSum returns the hash of `sha256sum` output ("HEX  NAME").
func parseSum(out string) (string, error) {
	f := strings.Fields(out)
	if len(f) == 0 || len(f[0]) != 64 {
		return "", fmt.Errorf("unexpected sha256sum output %q", truncateOutput(out))
	}
	return f[0], nil
}

func truncateOutput(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// peerThroughputCases pipe bytes through `RUNTIME exec` of a raw container.
func peerThroughputCases(e *execPeer, data payload) []throughputCase {
	base := ThroughputRow{Subject: e.p.peer + " exec", Kind: KindRaw, Runtime: e.p.peer}
	n := strconv.FormatInt(data.n, 10)
	stdout := base
	stdout.Direction = DirStdout
	stdout.Method = "`" + e.p.peer + " exec NAME head -c N /dev/zero` with its stdout on a pipe to this process, hashed here → its exit"
	stdin := base
	stdin.Direction = DirStdin
	stdin.Method = "`" + e.p.peer + " exec NAME sha256sum` with its stdin on a pipe from this process → its exit; the printed sum is compared"
	return []throughputCase{
		{row: stdout, run: func(ctx context.Context) (time.Duration, error) {
			hc := newHashCounter()
			cmd := e.p.command(e.execArgsFor(e.name, "head", "-c", n, "/dev/zero")...)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = hc, &stderr
			t0 := time.Now()
			if err := runCmd(ctx, cmd); err != nil {
				return 0, fmt.Errorf("%w: %s", err, truncateOutput(stderr.String()))
			}
			d := time.Since(t0)
			return d, hc.check(data.n, data.zerosSum)
		}},
		{row: stdin, run: func(ctx context.Context) (time.Duration, error) {
			cmd := e.p.command(e.execArgsFor(e.name, "sha256sum")...)
			var out bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = data.reader(), &out, &out
			t0 := time.Now()
			if err := runCmd(ctx, cmd); err != nil {
				return 0, fmt.Errorf("%w: %s", err, truncateOutput(out.String()))
			}
			d := time.Since(t0)
			sum, err := parseSum(out.String())
			if err == nil && sum != data.sum {
				err = fmt.Errorf("sha256sum inside printed %s, want %s", sum, data.sum)
			}
			return d, err
		}},
	}
}

// runCmd runs cmd, killing it if ctx ends.
func runCmd(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	err := cmd.Wait()
	if ctx.Err() != nil {
		return errors.Join(err, context.Cause(ctx))
	}
	return err
}
