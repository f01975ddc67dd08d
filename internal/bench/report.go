package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
)

// Kinds of subject.
const (
	KindAirlock = "airlock" // the full path through an in-process airlock server
	KindRaw     = "raw"     // an OCI runtime or podman run directly on a bundle
)

// Report is the result of one benchmark run.
type Report struct {
	Benchmark string    `json:"benchmark"` // what one sample measures
	StartedAt time.Time `json:"started_at"`
	Runs      int       `json:"runs"`   // counted runs per subject
	Warmup    int       `json:"warmup"` // uncounted runs per subject before them
	Seed      uint64    `json:"seed"`   // seed of the per-round order
	Order     string    `json:"order"`  // how subjects were ordered
	Template  string    `json:"template"`
	Host      HostFacts `json:"host"`
	Subjects  []Subject `json:"subjects"`
	Ratios    []Ratio   `json:"ratios"`
	// Targets are the targets the subjects measured, met or not.
	Targets []Target  `json:"targets,omitempty"`
	Skipped []Skipped `json:"skipped"`
}

// Subject is one measured way of running `echo hello`.
type Subject struct {
	Name      string                `json:"name"` // "airlock-runsc", "runsc run", …
	Kind      string                `json:"kind"` // KindAirlock or KindRaw
	Runtime   string                `json:"runtime"`
	Isolation environment.Isolation `json:"isolation"`
	// Source is how an Airlock subject's creates got their sandbox:
	// "cold" or "pool" (every one checked).
	Source string `json:"source,omitempty"`
	Rootfs string `json:"rootfs"` // how its root filesystem was set up
	Method string `json:"method"` // what was timed, from what to what
	// FirstOutput is the time from the start to the first stdout byte.
	FirstOutput Stats `json:"first_output"`
	// Phases split FirstOutput (Airlock subjects only), in order.
	Phases []Phase `json:"phases,omitempty"`
	// Samples are the counted first-output times in the order measured.
	Samples []time.Duration `json:"-"`
}

// MarshalJSON adds samples_ms to the plain fields.
func (s Subject) MarshalJSON() ([]byte, error) {
	type plain Subject
	ms := make([]float64, len(s.Samples))
	for i, d := range s.Samples {
		ms[i] = millis(d)
	}
	return json.Marshal(struct {
		plain
		SamplesMs []float64 `json:"samples_ms"`
	}{plain(s), ms})
}

// Phase is one step of an Airlock sample.
type Phase struct {
	Name  string `json:"name"`
	What  string `json:"what"`
	Stats Stats  `json:"stats"`
}

// Ratio compares an Airlock subject with the raw run of the same runtime.
type Ratio struct {
	Airlock string  `json:"airlock"`
	Peer    string  `json:"peer"`
	P50     float64 `json:"p50"` // Airlock's p50 / the peer's p50
	P95     float64 `json:"p95"` // Airlock's p95 / the peer's p95
}

// Skipped is a subject that was not measured, and why.
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// HostFacts describe the machine the numbers come from.
type HostFacts struct {
	CPUs           int               `json:"cpus"`
	Kernel         string            `json:"kernel"`
	OS             string            `json:"os,omitempty"`
	Cgroups        string            `json:"cgroups"`
	GoVersion      string            `json:"go_version"`
	AirlockVersion string            `json:"airlock_version,omitempty"`
	Versions       map[string]string `json:"versions"` // runtime binary → version
}

// String renders the facts on one line.
func (h HostFacts) String() string {
	parts := []string{fmt.Sprintf("%d CPUs", h.CPUs), "Linux " + h.Kernel}
	if h.OS != "" {
		parts = append(parts, h.OS)
	}
	parts = append(parts, "cgroups "+h.Cgroups)
	names := make([]string, 0, len(h.Versions))
	for n := range h.Versions {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		parts = append(parts, n+" "+h.Versions[n])
	}
	if h.AirlockVersion != "" {
		parts = append(parts, "airlock "+h.AirlockVersion)
	}
	parts = append(parts, h.GoVersion)
	return strings.Join(parts, ", ")
}

// ratioFor returns the ratio whose Airlock subject is name.
func (r Report) ratioFor(name string) (Ratio, bool) {
	for _, x := range r.Ratios {
		if x.Airlock == name {
			return x, true
		}
	}
	return Ratio{}, false
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report for humans: one row per subject, Airlock's
// phases, how each root filesystem was set up, and the host facts.
func (r Report) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fmt.Fprintf(bw, "%d runs per subject after %d warm-up runs; %s\n\n", r.Runs, r.Warmup, r.Order)

	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tISOLATION\tN\tP50\tP95\tP99\tMIN\tMAX\tMEAN\tP50 RATIO")
	for _, s := range r.Subjects {
		ratio := "-"
		if x, ok := r.ratioFor(s.Name); ok {
			ratio = fmt.Sprintf("%.2f× %s", x.P50, x.Peer)
		}
		st := s.FirstOutput
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Isolation, st.N,
			formatDuration(st.P50), formatDuration(st.P95), formatDuration(st.P99), formatDuration(st.Min),
			formatDuration(st.Max), formatDuration(st.Mean), ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(bw, "%s: %s, skipped\n", s.Name, s.Reason)
	}
	writeTargets(bw, r.Targets)

	if phased := r.phased(); len(phased) > 0 {
		fmt.Fprintf(bw, "\nAirlock phases, p50 / p95 (in each run they add up to its total):\n")
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		header := []string{"SUBJECT"}
		for _, p := range phased[0].Phases {
			header = append(header, strings.ToUpper(p.Name))
		}
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, s := range phased {
			row := []string{s.Name}
			for _, p := range s.Phases {
				row = append(row, formatDuration(p.Stats.P50)+" / "+formatDuration(p.Stats.P95))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range phased[0].Phases {
			fmt.Fprintf(bw, "  %s: %s\n", p.Name, p.What)
		}
	}

	fmt.Fprintf(bw, "\nWhat was timed and on which root filesystem (template %s):\n", r.Template)
	for _, s := range r.Subjects {
		fmt.Fprintf(bw, "  %s: %s; %s\n", s.Name, s.Method, s.Rootfs)
	}
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

// writeTargets lists the targets and whether they were met.
func writeTargets(w io.Writer, targets []Target) {
	if len(targets) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTargets (issue 12):\n")
	for _, t := range targets {
		fmt.Fprintf(w, "  %s: %s, want %s: %s\n", t.Name, t.Got, t.Want, metWord(t.Met))
	}
}

func metWord(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// phased returns the subjects that have phases.
func (r Report) phased() []Subject {
	var out []Subject
	for _, s := range r.Subjects {
		if len(s.Phases) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// errWriter remembers the first write error so the table code can stay flat.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
