package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

func (b *vmBench) idleMemory(ctx context.Context) (VMMemoryReport, error) {
	defer b.deleteAll(ctx)
	m := VMMemoryReport{PerKind: b.opts.Idle, IdleSeconds: b.opts.IdleWait.Seconds()}
	var clones, colds []model.SandboxID
	for i := range b.opts.Idle {
		b.progress("idle memory: base clone %d/%d", i+1, b.opts.Idle)
		c, err := b.airlockCreate(ctx, b.base)
		if err != nil {
			return m, fmt.Errorf("bench: idle clone: %w", err)
		}
		clones = append(clones, c.spec.ID)
	}
	for i := range b.opts.Idle {
		b.progress("idle memory: cold VM %d/%d", i+1, b.opts.Idle)
		c, err := b.airlockCreate(ctx, b.cold)
		if err != nil {
			return m, fmt.Errorf("bench: idle cold VM: %w", err)
		}
		colds = append(colds, c.spec.ID)
	}
	b.progress("idle memory: %d VMs idle for %s", 2*b.opts.Idle, b.opts.IdleWait)
	select {
	case <-time.After(b.opts.IdleWait):
	case <-ctx.Done():
		return m, ctx.Err()
	}
	var err error
	if m.Clones, err = b.usage(ctx, b.base, clones); err != nil {
		return m, err
	}
	if m.Cold, err = b.usage(ctx, b.cold, colds); err != nil {
		return m, err
	}
	return m, nil
}

func (b *vmBench) usage(ctx context.Context, rt *qemu.Runtime, ids []model.SandboxID) (VMMemUsage, error) {
	var sum VMMemUsage
	for _, id := range ids {
		st, err := rt.State(ctx, id)
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", st.Pid))
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		u, err := parseSmapsRollup(string(raw))
		if err != nil {
			return sum, fmt.Errorf("bench: qemu %d: %w", st.Pid, err)
		}
		smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", st.Pid))
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		u.GuestRAMPss, u.GuestRAMPrivateDirty = guestRAMUsage(string(smaps), func(path string) bool {
			return strings.HasPrefix(path, b.root+"/") && filepath.Base(path) == "memory"
		})
		sum.GuestRAMPss += u.GuestRAMPss
		sum.GuestRAMPrivateDirty += u.GuestRAMPrivateDirty
		sum.Rss += u.Rss
		sum.Pss += u.Pss
		sum.PrivateDirty += u.PrivateDirty
		sum.PrivateClean += u.PrivateClean
		sum.SharedClean += u.SharedClean
		sum.SharedDirty += u.SharedDirty
		sum.N++
	}
	if sum.N == 0 {
		return sum, nil
	}
	n := int64(sum.N)
	return VMMemUsage{N: sum.N, Rss: sum.Rss / n, Pss: sum.Pss / n, PrivateDirty: sum.PrivateDirty / n,
		PrivateClean: sum.PrivateClean / n, SharedClean: sum.SharedClean / n, SharedDirty: sum.SharedDirty / n,
		GuestRAMPss: sum.GuestRAMPss / n, GuestRAMPrivateDirty: sum.GuestRAMPrivateDirty / n}, nil
}

// guestRAMUsage sums Pss and Private_Dirty over the mappings of
// /proc/PID/smaps content whose path ram accepts.
func guestRAMUsage(smaps string, ram func(path string) bool) (pss, privateDirty int64) {
	in := false
	for _, line := range strings.Split(smaps, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: range perms offset dev inode [path]
			in = len(f) >= 6 && ram(strings.Join(f[5:], " "))
			continue
		}
		if !in || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Pss:":
			pss += kb << 10
		case "Private_Dirty:":
			privateDirty += kb << 10
		}
	}
	return pss, privateDirty
}

// parseSmapsRollup reads the fields of /proc/PID/smaps_rollup content.
func parseSmapsRollup(s string) (VMMemUsage, error) {
	var u VMMemUsage
	fields := map[string]*int64{"Rss": &u.Rss, "Pss": &u.Pss, "Private_Dirty": &u.PrivateDirty,
		"Private_Clean": &u.PrivateClean, "Shared_Clean": &u.SharedClean, "Shared_Dirty": &u.SharedDirty}
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		p, ok := fields[strings.TrimSpace(k)]
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return u, fmt.Errorf("smaps_rollup: %s: unexpected value %q", k, strings.TrimSpace(v))
		}
		*p = kb << 10
		seen++
	}
	if seen != len(fields) {
		return u, fmt.Errorf("smaps_rollup: %d of the %d fields found", seen, len(fields))
	}
	return u, nil
}

// ---- the runtime's debug timings ----

// timingHandler collects the qemu runtime's debug timings ("restored the
// base snapshot": disk, launch, load; "started": cont, configure) per
// sandbox and passes warnings and errors on.
type timingHandler struct {
	next  slog.Handler
	attrs []slog.Attr
	store *timingStore
}

type timingStore struct {
	mu   sync.Mutex
	byID map[string]map[string]time.Duration
	// retries counts "guest agent not answering yet" (the runtime's
	// retryConfigure waits 100 ms after each) since the last take.
	retries int
}

func (h *timingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *timingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "guest agent not answering yet" {
		h.store.mu.Lock()
		h.store.retries++
		h.store.mu.Unlock()
	}
	if r.Message == "restored the base snapshot" || r.Message == "started" {
		var id string
		got := map[string]time.Duration{}
		collect := func(a slog.Attr) bool {
			switch a.Key {
			case "sandbox":
				id = fmt.Sprint(a.Value.Any())
			case "disk", "launch", "load", "cont", "configure":
				if a.Value.Kind() == slog.KindDuration {
					got[a.Key] = a.Value.Duration()
				}
			}
			return true
		}
		for _, a := range h.attrs {
			collect(a)
		}
		r.Attrs(collect)
		if id != "" {
			h.store.mu.Lock()
			if h.store.byID[id] == nil {
				h.store.byID[id] = map[string]time.Duration{}
			}
			for k, d := range got {
				h.store.byID[id][k] = d
			}
			h.store.mu.Unlock()
		}
	}
	if r.Level >= slog.LevelWarn && h.next.Enabled(ctx, r.Level) {
		return h.next.WithAttrs(h.attrs).Handle(ctx, r)
	}
	return nil
}

func (h *timingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *timingHandler) WithGroup(string) slog.Handler { return h }

// take returns the timings of sandbox id and the retries counted since
// the last take (the bench runs one sandbox operation at a time).
func (h *timingHandler) take(id string) (map[string]time.Duration, int) {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	m := h.store.byID[id]
	delete(h.store.byID, id)
	n := h.store.retries
	h.store.retries = 0
	return m, n
}

func (h *timingHandler) forget(id string) { h.take(id) }

// ---- host facts and output ----

func hostFactsVM(ctx context.Context, version string) HostFacts {
	cg, _ := cgroups.Detect() // only reported
	return hostFacts(ctx, cg, nil, version)
}

// WriteJSON writes the report as indented JSON.
func (r VMReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r VMReport) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fmt.Fprintf(bw, "accelerator %s, 1 vCPU, %d MiB RAM, %d MiB disk; %d rounds after %d warm-up rounds\n\n", r.Accel, r.MemoryMiB, r.DiskBytes>>20, r.Runs, r.Warmup)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tN\tP50\tP95\tMIN\tMAX\tMEAN")
	for _, f := range r.Figures {
		st := f.Stats
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", f.Name, st.N, formatDuration(st.P50), formatDuration(st.P95),
			formatDuration(st.Min), formatDuration(st.Max), formatDuration(st.Mean))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(bw, "\nbase snapshot made once in %s (not in the figures)\n", formatDuration(fromMillis(r.BaseBuildMs)))
	fmt.Fprintf(bw, "restore speed-up (cold p50 / base-snapshot p50): %.2f×; target ≥ 8×: %v\n", r.RestoreOverCold, r.Met[VMTarget])
	fmt.Fprintf(bw, "bare QEMU: boot p50 / restore p50: %.2f×\n", r.PeerRestoreOverBoot)
	fmt.Fprintf(bw, "airlock over bare QEMU (p50): cold %.2f× its boot, base-snapshot %.2f× its restore\n", r.ColdOverPeer, r.BaseOverPeerRestore)

	for _, name := range []string{VMCold, VMBase, VMWake, VMProfile} {
		ps := r.Phases[name]
		if len(ps) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n%s, phases p50 / p95:\n", name)
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		for _, p := range ps {
			fmt.Fprintf(tw, "  %s\t%s / %s\t%s\n", p.Name, formatDuration(p.Stats.P50), formatDuration(p.Stats.P95), p.What)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n, ok := r.ConfigureRetries[name]; ok {
			fmt.Fprintf(bw, "  guest configuration retries (agent not answering yet, 100 ms each): %.2f per create\n", n)
		}
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(bw, "\nhost memory per idle VM (QEMU's smaps_rollup, average of %d each, after %.0f s idle):\n", m.PerKind, m.IdleSeconds)
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tRSS\tPSS\tPRIVATE_DIRTY\tPRIVATE_CLEAN\tSHARED_CLEAN\tSHARED_DIRTY\tGUEST RAM PSS\tGUEST RAM PRIVATE_DIRTY")
		for _, row := range []struct {
			name string
			u    VMMemUsage
		}{{"base-snapshot clone", m.Clones}, {"cold-booted", m.Cold}} {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.name, mib(row.u.Rss), mib(row.u.Pss), mib(row.u.PrivateDirty),
				mib(row.u.PrivateClean), mib(row.u.SharedClean), mib(row.u.SharedDirty), mib(row.u.GuestRAMPss), mib(row.u.GuestRAMPrivateDirty))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(bw, "\nWhat was timed:\n")
	for _, f := range r.Figures {
		fmt.Fprintf(bw, "  %s: %s\n", f.Name, f.Method)
	}
	fmt.Fprintf(bw, "kernel %s, initramfs %s\ncommand line %s\n", r.Kernel, r.Initrd, r.Cmdline)
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
