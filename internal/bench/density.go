package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/server"
)

// DensityOptions configures RunDensity. Zero fields take the defaults of
// `airlock bench density`.
type DensityOptions struct {
	// Runtimes are measured one after the other (default runc, runsc),
	// each on its own in-process server.
	Runtimes []string
	// Count is the number of idle sandboxes per runtime (default 200);
	// Counts overrides it per runtime (e.g. runsc: 50).
	Count  int
	Counts map[string]int
	// MemoryMiB is every sandbox's memory limit (default 64).
	MemoryMiB int
	// Idle is how long the sandboxes idle before they are measured
	// (default 10 s).
	Idle time.Duration
	// Clients make the creates concurrently (default 4).
	Clients int
	// Peers adds, per runtime that has one (runc, crun, runsc), as many
	// idle `RUNTIME run --detach` containers running sleep, measured the
	// same way.
	Peers bool
	// AgentBinary is the static airlock-agent the servers use (required).
	AgentBinary  string
	TempDir      string
	Progress     io.Writer
	ServerLogger *slog.Logger
	Logger       *slog.Logger
	Version      string
}

// Defaults of RunDensity.
const (
	defaultDensityCount     = 200
	defaultDensityMemoryMiB = 64
	defaultDensityIdle      = 10 * time.Second
	defaultDensityClients   = 4
)

// Targets of issue 12: host memory per idle sandbox.
var densityTargets = map[string]float64{"runc": 3, "runsc": 60} // MiB

func (o *DensityOptions) defaults() error {
	if len(o.Runtimes) == 0 {
		o.Runtimes = []string{string(oci.FlavorRunc), string(oci.FlavorRunsc)}
	}
	for i, r := range o.Runtimes {
		if _, err := oci.ParseFlavor(r); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if slices.Contains(o.Runtimes[:i], r) {
			return fmt.Errorf("bench: runtime %s given twice", r)
		}
	}
	if o.Count == 0 {
		o.Count = defaultDensityCount
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = defaultDensityMemoryMiB
	}
	if o.Idle == 0 {
		o.Idle = defaultDensityIdle
	}
	if o.Clients == 0 {
		o.Clients = defaultDensityClients
	}
	if o.Count < 1 || o.MemoryMiB < 1 || o.Clients < 1 || o.Idle < 0 {
		return errors.New("bench: count, memory and clients must be at least 1, idle not negative")
	}
	for r, n := range o.Counts {
		if n < 1 {
			return fmt.Errorf("bench: the count of %s must be at least 1", r)
		}
	}
	return nil
}

func (o *DensityOptions) count(rt string) int {
	if n, ok := o.Counts[rt]; ok {
		return n
	}
	return o.Count
}

// DensityReport is the result of RunDensity.
type DensityReport struct {
	Benchmark string          `json:"benchmark"`
	StartedAt time.Time       `json:"started_at"`
	Template  string          `json:"template"`
	MemoryMiB int             `json:"memory_mib"`
	Idle      time.Duration   `json:"-"`
	IdleSecs  float64         `json:"idle_seconds"`
	Rows      []DensityRow    `json:"rows"`
	Targets   []Target        `json:"targets,omitempty"`
	Skipped   []Skipped       `json:"skipped,omitempty"`
	Host      HostFacts       `json:"host"`
	Cleanup   DensityCleanup  `json:"cleanup"`
	Processes []DensityByName `json:"processes,omitempty"`
}

// DensityRow is the memory of one kind of idle sandbox, per sandbox (MiB).
type DensityRow struct {
	Name    string `json:"name"` // airlock-runc, runc run, …
	Kind    string `json:"kind"` // KindAirlock or KindRaw
	Runtime string `json:"runtime"`
	Count   int    `json:"count"`
	// HostMiB: the drop of the host's MemAvailable from before the first
	// create to after the idle period, over Count: everything the host
	// can no longer give away (processes, page cache that cannot be
	// dropped, kernel objects, the server's bookkeeping), and any other
	// activity on the host in that time.
	HostMiB float64 `json:"host_mib"`
	// CgroupMiB: the sandboxes' memory cgroups' usage (memory.current, or
	// memory.usage_in_bytes on cgroup v1), averaged: their processes'
	// memory, the page cache and kernel memory charged to them.
	CgroupMiB float64 `json:"cgroup_mib"`
	// PssMiB: the summed Pss of every process in the sandboxes' cgroups
	// and of every other process whose command line names a sandbox
	// (e.g. runsc's gofer), averaged.
	PssMiB float64 `json:"pss_mib"`
	// Procs is the average number of such processes per sandbox.
	Procs float64 `json:"procs"`
	// FootprintMiB is max(CgroupMiB, PssMiB): the figure the targets are
	// judged on. HostMiB would include more (a sandbox's network
	// namespace, disk loop device and mount, the server's bookkeeping)
	// but on a shared host it moves by more than that with everything
	// else that runs; Meminfo shows where it went.
	FootprintMiB float64 `json:"footprint_mib"`
	// Meminfo splits HostMiB: the change of some /proc/meminfo fields
	// over the same period, per sandbox (MiB), and of the benchmark
	// process's own RSS (the in-process server's bookkeeping).
	Meminfo map[string]float64 `json:"meminfo_mib"`
}

// meminfoFields are the /proc/meminfo fields whose change is reported.
var meminfoFields = []string{"AnonPages", "Shmem", "Buffers", "Cached", "SUnreclaim", "SReclaimable", "KernelStack", "PageTables"}

// selfRSSField names the benchmark process's RSS in DensityRow.Meminfo.
const selfRSSField = "bench process RSS"

// hostMemory is a reading of the host's memory.
type hostMemory struct {
	available int64
	fields    map[string]int64
	selfRSS   int64
}

func readHostMemory() (hostMemory, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return hostMemory{}, err
	}
	h := hostMemory{fields: map[string]int64{}}
	if h.available, err = meminfoField(string(data), "MemAvailable"); err != nil {
		return h, err
	}
	for _, f := range meminfoFields {
		if v, err := meminfoField(string(data), f); err == nil {
			h.fields[f] = v
		}
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return h, err
	}
	h.selfRSS, err = statusKB(string(st), "VmRSS")
	return h, err
}

// deltaPer is the change from before to after per sandbox, in MiB.
func (after hostMemory) deltaPer(before hostMemory, n int) map[string]float64 {
	out := map[string]float64{selfRSSField: mibPer(after.selfRSS-before.selfRSS, n)}
	for f, v := range after.fields {
		if b, ok := before.fields[f]; ok {
			out[f] = mibPer(v-b, n)
		}
	}
	return out
}

// DensityByName is the Pss of one row's processes grouped by command name.
type DensityByName struct {
	Row    string  `json:"row"`
	Comm   string  `json:"comm"`
	Procs  int     `json:"procs"`
	PssMiB float64 `json:"pss_mib_per_sandbox"`
}

// DensityCleanup says what the run checked was gone after each row.
type DensityCleanup struct {
	Containers int `json:"containers_left"`
	Cgroups    int `json:"cgroups_left"`
	Mounts     int `json:"mounts_left"`
}

// RunDensity runs `airlock bench density`: per runtime, Count idle
// sandboxes made through an in-process server and, with Peers, as many
// idle raw containers; after Idle, their host memory per sandbox three
// ways (see DensityRow). Each set is deleted (and checked gone: no
// runtime state, cgroup or mount left) before the next is made.
func RunDensity(ctx context.Context, opts DensityOptions) (DensityReport, error) {
	if err := opts.defaults(); err != nil {
		return DensityReport{}, err
	}
	cfg := Config{
		Runs: 1, Runtimes: opts.Runtimes, AgentBinary: opts.AgentBinary, TempDir: opts.TempDir,
		Progress: opts.Progress, ServerLogger: opts.ServerLogger, Logger: opts.Logger, Version: opts.Version,
	}
	return runWith(ctx, cfg, func(b *benchmark, ctx context.Context) (DensityReport, error) {
		return b.density(ctx, opts)
	})
}

func (b *benchmark) density(ctx context.Context, o DensityOptions) (DensityReport, error) {
	rep := DensityReport{
		Benchmark: "airlock bench density: host memory per idle sandbox",
		StartedAt: time.Now().UTC(), MemoryMiB: o.MemoryMiB, Idle: o.Idle, IdleSecs: o.Idle.Seconds(),
	}
	maxCount := 0
	for _, r := range o.Runtimes {
		maxCount = max(maxCount, o.count(r))
	}
	b.prepareServer = func(_ string, opts *server.Options) error {
		opts.MaxSandboxes = max(opts.MaxSandboxes, maxCount+16)
		for _, r := range o.Runtimes { // one runtime's set at a time
			pidsServerOptions(opts, r, o.MemoryMiB, o.count(r)+16, 0)
		}
		return nil
	}
	first, err := b.startServers(ctx)
	if err != nil {
		return rep, err
	}
	digest, lower, err := b.templateTree(ctx, first)
	if err != nil {
		return rep, err
	}
	rep.Template = digest.String()
	for _, s := range b.subjects {
		a := s.(*airlockSubject)
		n := o.count(string(a.flavor))
		row, byName, err := b.densityAirlock(ctx, a, n, o)
		if gerr := b.checkGone(a, &rep.Cleanup); gerr != nil {
			return rep, errors.Join(err, gerr)
		}
		if err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, row)
		rep.Processes = append(rep.Processes, byName...)
	}
	if o.Peers {
		for _, r := range o.Runtimes {
			row, byName, skipped, err := b.densityPeer(ctx, r, lower, o.count(r), o)
			if err != nil {
				return rep, err
			}
			if skipped != nil {
				rep.Skipped = append(rep.Skipped, *skipped)
				continue
			}
			rep.Rows = append(rep.Rows, row)
			rep.Processes = append(rep.Processes, byName...)
		}
	}
	rep.Host = hostFacts(ctx, b.cg, b.binaries, b.cfg.Version)
	rep.Targets = densityTargetsOf(rep.Rows)
	return rep, nil
}

// densityAirlock makes n idle sandboxes on a's server, measures them and
// deletes them.
func (b *benchmark) densityAirlock(ctx context.Context, a *airlockSubject, n int, o DensityOptions) (DensityRow, []DensityByName, error) {
	name := "airlock-" + string(a.flavor)
	clients, err := a.clients(o.Clients)
	if err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: %w", err)
	}
	before, err := readHostMemory()
	if err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: %w", err)
	}
	b.progressf("%s: creating %d sandboxes (%d MiB each) from %d clients…", name, n, o.MemoryMiB, o.Clients)
	results, _, err := createMany(ctx, clients, apiv1.CreateSandboxRequest{Environment: string(a.flavor), MemoryMiB: o.MemoryMiB}, n)
	ids := idsOf(results)
	defer func() {
		// Deleted on every path; the caller checks what is left.
		b.progressf("%s: deleting %d sandboxes…", name, len(ids))
		if derr := a.deleteMany(ctx, clients, ids); derr != nil {
			b.cfg.Logger.Warn("delete the density sandboxes", "runtime", a.flavor, "err", derr)
		}
	}()
	if err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: %s: create: %w", name, err)
	}
	b.progressf("%s: %d sandboxes running; idle %s…", name, n, o.Idle)
	if err := sleepCtx(ctx, o.Idle); err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: interrupted: %w", err)
	}
	after, err := readHostMemory()
	if err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: %w", err)
	}
	var groups []cgroups.Path
	var names []string
	for _, id := range ids {
		p, err := cgroups.ParsePath(oci.DefaultCgroupParent + "/" + id.String())
		if err != nil {
			return DensityRow{}, nil, fmt.Errorf("bench: %w", err)
		}
		groups, names = append(groups, p), append(names, id.String())
	}
	m, err := measureGroups(b.cg, groups, names)
	if err != nil {
		return DensityRow{}, nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	row := densityRow(name, KindAirlock, string(a.flavor), n, before, after, m)
	b.progressf("%s: %.1f MiB host, %.1f MiB cgroup, %.1f MiB Pss per sandbox", name, row.HostMiB, row.CgroupMiB, row.PssMiB)
	return row, m.byName(name, n), nil
}

// checkGone waits until a's runtime has no sandbox left and checks that
// no sandbox cgroup and no mount of its runtime is left.
func (b *benchmark) checkGone(a *airlockSubject, c *DensityCleanup) error {
	ctx, cancel := context.WithTimeout(context.Background(), poolFillTimeout)
	defer cancel()
	if err := a.waitNoContainers(ctx, poolFillTimeout); err != nil {
		n, _ := a.runtimeSandboxes()
		c.Containers += n
		return fmt.Errorf("bench: %w", err)
	}
	parent, err := cgroups.ParsePath(oci.DefaultCgroupParent)
	if err != nil {
		return err
	}
	// Another server (or a production one) may share the parent: only
	// the cgroups named after this server's sandboxes count (deleted
	// ones are listed until the retention purges them).
	list, err := a.c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for _, sb := range list.Sandboxes {
		p, err := parent.Join(sb.ID)
		if err != nil {
			continue
		}
		if ok, _ := b.cg.Exists(p); ok {
			c.Cgroups++
		}
	}
	// The runtime's shared agent filesystem (sandboxes/.agentfs) stays
	// mounted until the server stops; a sandbox's mounts are below its
	// own directory.
	root := filepath.Join(a.dir, "runtime", string(a.flavor), "sandboxes")
	all, err := rootfs.MountsUnder(root)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var mounts []string
	for _, m := range all {
		rel, _ := filepath.Rel(root, m)
		if _, err := model.ParseSandboxID(strings.Split(rel, string(filepath.Separator))[0]); err == nil {
			mounts = append(mounts, m)
		}
	}
	c.Mounts += len(mounts)
	if c.Cgroups > 0 || c.Mounts > 0 {
		return fmt.Errorf("bench: airlock-%s left %d cgroups and %d mounts (%q) after deleting its sandboxes", a.flavor, c.Cgroups, c.Mounts, mounts)
	}
	return nil
}

// groupMemory is what measureGroups found.
type groupMemory struct {
	cgroupBytes int64
	pssBytes    int64
	procs       int
	byComm      map[string]*commMemory
}

type commMemory struct {
	procs int
	pss   int64
}

// measureGroups sums the memory usage of the cgroups and the Pss of every
// process in them or whose command line contains one of names.
func measureGroups(cg cgroups.Host, groups []cgroups.Path, names []string) (groupMemory, error) {
	m := groupMemory{byComm: map[string]*commMemory{}}
	pids := map[int]bool{}
	for _, p := range groups {
		u, err := cgroupMemoryUsage(cg, p)
		if err != nil {
			return m, err
		}
		m.cgroupBytes += u
		procs, err := cg.Procs(p)
		if err != nil {
			return m, err
		}
		for _, pid := range procs {
			pids[pid] = true
		}
	}
	// Processes outside the cgroups that belong to a sandbox (runsc's
	// gofer, a runtime's helper): their command line names it.
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return m, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pids[pid] {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, n := range names {
			if bytes.Contains(cmd, []byte(n)) {
				pids[pid] = true
				break
			}
		}
	}
	for pid := range pids {
		pss, err := processPss(pid)
		if err != nil {
			continue // exited meanwhile
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		c := strings.TrimSpace(string(comm))
		if m.byComm[c] == nil {
			m.byComm[c] = &commMemory{}
		}
		m.byComm[c].procs++
		m.byComm[c].pss += pss
		m.pssBytes += pss
		m.procs++
	}
	return m, nil
}

func (m groupMemory) byName(row string, n int) []DensityByName {
	var out []DensityByName
	for c, x := range m.byComm {
		out = append(out, DensityByName{Row: row, Comm: c, Procs: x.procs, PssMiB: mibPer(x.pss, n)})
	}
	slices.SortFunc(out, func(a, b DensityByName) int {
		switch {
		case a.PssMiB > b.PssMiB:
			return -1
		case a.PssMiB < b.PssMiB:
			return 1
		}
		return strings.Compare(a.Comm, b.Comm)
	})
	return out
}

func densityRow(name, kind, rt string, n int, before, after hostMemory, m groupMemory) DensityRow {
	return DensityRow{
		Name: name, Kind: kind, Runtime: rt, Count: n,
		HostMiB:      mibPer(before.available-after.available, n),
		Meminfo:      after.deltaPer(before, n),
		CgroupMiB:    mibPer(m.cgroupBytes, n),
		PssMiB:       mibPer(m.pssBytes, n),
		Procs:        float64(m.procs) / float64(n),
		FootprintMiB: max(mibPer(m.cgroupBytes, n), mibPer(m.pssBytes, n)),
	}
}

// densityTargetsOf judges the Airlock rows on the targets, by their
// footprint (see DensityRow.FootprintMiB).
func densityTargetsOf(rows []DensityRow) []Target {
	var out []Target
	for _, r := range rows {
		want, ok := densityTargets[r.Runtime]
		if !ok || r.Kind != KindAirlock {
			continue
		}
		out = append(out, Target{
			Name: fmt.Sprintf("host memory per idle %s sandbox (%d idle)", r.Runtime, r.Count),
			Want: fmt.Sprintf("≤ %.0f MiB", want),
			Got:  fmt.Sprintf("%.2f MiB (cgroup %.2f, Pss %.2f; host MemAvailable drop %.2f)", r.FootprintMiB, r.CgroupMiB, r.PssMiB, r.HostMiB),
			Met:  r.FootprintMiB <= want,
		})
	}
	return out
}

// meminfoField returns a "Field:   123 kB" line of /proc/meminfo in bytes.
func meminfoField(content, field string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("meminfo %s: unexpected value %q", field, strings.TrimSpace(v))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/meminfo", field)
}

// processPss returns the Pss of a process (smaps_rollup) in bytes.
func processPss(pid int) (int64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, err
	}
	return meminfoField(string(data), "Pss")
}

// cgroupMemoryUsage returns the memory usage of cgroup p: memory.current
// on cgroup v2, memory.usage_in_bytes on v1. A cgroup that does not exist
// uses nothing.
func cgroupMemoryUsage(cg cgroups.Host, p cgroups.Path) (int64, error) {
	dir, err := cg.ControllerDir("memory", p)
	if err != nil {
		return 0, err
	}
	for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	}
	return 0, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// peerSet is a set of idle raw containers of one peer, removed on close.
type peerSet struct {
	p  *peerSubject
	es []*execPeer
}

func (s *peerSet) info() Subject {
	return Subject{Name: s.p.peer + " run --detach", Kind: KindRaw, Runtime: s.p.peer}
}
func (s *peerSet) once(context.Context) (sample, error) {
	return sample{}, errors.New("a peer set is not timed")
}
func (s *peerSet) close(ctx context.Context) error { return s.removeAll(ctx, true) }

// removeAll removes every container of the set and, with parent, the
// peers' cgroup parent.
func (s *peerSet) removeAll(ctx context.Context, parent bool) error {
	var errs []error
	for _, e := range s.es {
		if e.started {
			if err := s.p.remove(ctx, e.name, e.bundle, e.cg); err != nil {
				errs = append(errs, err)
			}
			e.started = false
		}
	}
	if parent {
		if err := s.p.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// densityPeer starts n idle detached raw containers of runtime rt (sleep,
// the same bundle as the create benchmark's peers), measures them as the
// Airlock sandboxes are measured, and removes them.
func (b *benchmark) densityPeer(ctx context.Context, rt, lower string, n int, o DensityOptions) (DensityRow, []DensityByName, *Skipped, error) {
	name := rt + " run --detach"
	bin, err := exec.LookPath(rt)
	if err != nil {
		return DensityRow{}, nil, &Skipped{Name: name, Reason: "not installed"}, nil
	}
	b.binaries[rt] = bin
	cgParent, err := cgroups.ParsePath("/" + filepath.Base(b.tmp))
	if err != nil {
		return DensityRow{}, nil, nil, fmt.Errorf("bench: cgroup parent: %w", err)
	}
	p, err := newPeer(rt, bin, filepath.Join(b.tmp, "d-"+rt), lower, b.cg, cgParent, b.cfg.Logger)
	if err != nil {
		return DensityRow{}, nil, nil, fmt.Errorf("bench: %w", err)
	}
	set := &peerSet{p: p}
	b.subjects = append(b.subjects, set) // removed on any exit
	before, err := readHostMemory()
	if err != nil {
		return DensityRow{}, nil, nil, fmt.Errorf("bench: %w", err)
	}
	b.progressf("%s: starting %d idle containers…", name, n)
	var (
		groups []cgroups.Path
		names  []string
	)
	for i := range n {
		// Names of one length: runsc takes a name as a prefix of IDs.
		e := &execPeer{p: p, name: fmt.Sprintf("alb-%s-idle-%05d", rt, i)}
		set.es = append(set.es, e)
		if err := e.setup(ctx); err != nil {
			return DensityRow{}, nil, nil, errors.Join(fmt.Errorf("bench: %s: %w", name, err), set.removeAll(context.WithoutCancel(ctx), false))
		}
		groups, names = append(groups, e.cg), append(names, e.name)
	}
	b.progressf("%s: %d running; idle %s…", name, n, o.Idle)
	if err := sleepCtx(ctx, o.Idle); err != nil {
		return DensityRow{}, nil, nil, errors.Join(fmt.Errorf("bench: interrupted: %w", err), set.removeAll(context.WithoutCancel(ctx), false))
	}
	after, err := readHostMemory()
	if err != nil {
		return DensityRow{}, nil, nil, fmt.Errorf("bench: %w", err)
	}
	m, err := measureGroups(b.cg, groups, names)
	if err != nil {
		return DensityRow{}, nil, nil, errors.Join(fmt.Errorf("bench: %s: %w", name, err), set.removeAll(context.WithoutCancel(ctx), false))
	}
	b.progressf("%s: removing %d containers…", name, n)
	if err := set.removeAll(context.WithoutCancel(ctx), false); err != nil {
		return DensityRow{}, nil, nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	row := densityRow(name, KindRaw, rt, n, before, after, m)
	b.progressf("%s: %.1f MiB host, %.1f MiB cgroup, %.1f MiB Pss per container", name, row.HostMiB, row.CgroupMiB, row.PssMiB)
	return row, m.byName(name, n), nil, nil
}

// mibPer is b bytes over n, in MiB.
func mibPer(b int64, n int) float64 { return float64(b) / (1 << 20) / float64(n) }
