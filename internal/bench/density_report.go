package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r DensityReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report for humans.
func (r DensityReport) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fmt.Fprintf(bw, "idle sandboxes (%d MiB memory limit, template %s) measured after %s idle; MiB per sandbox\n\n",
		r.MemoryMiB, r.Template, formatDuration(r.Idle))
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tN\tFOOTPRINT\tCGROUP\tPSS\tHOST\tPROCS\tFOOTPRINT RATIO")
	for _, row := range r.Rows {
		ratio := "-"
		if p, ok := r.peerRow(row); ok {
			ratio = fmt.Sprintf("%.2f× %s", ratioFloat(row.FootprintMiB, p.FootprintMiB), p.Name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%s\n", row.Name, row.Count, row.FootprintMiB, row.CgroupMiB, row.PssMiB, row.HostMiB, row.Procs, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(bw, "%s: %s, skipped\n", s.Name, s.Reason)
	}
	fmt.Fprintf(bw, "  FOOTPRINT: max(CGROUP, PSS), what the targets are judged on\n")
	fmt.Fprintf(bw, "  HOST: the drop of /proc/meminfo MemAvailable from before the first create to after the idle period (everything, incl. kernel objects and the server's bookkeeping, and whatever else ran on the host)\n")
	fmt.Fprintf(bw, "  CGROUP: the sandboxes' memory cgroups' usage (processes, page cache and kernel memory charged to them)\n")
	fmt.Fprintf(bw, "  PSS: summed Pss of the processes in those cgroups and of any process whose command line names a sandbox; PROCS: such processes per sandbox\n")
	if len(r.Rows) > 0 {
		fmt.Fprintf(bw, "\nChange of /proc/meminfo fields over the same period, MiB per sandbox (where HOST went):\n")
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		header := "SUBJECT"
		for _, f := range append(slices.Clone(meminfoFields), selfRSSField) {
			header += "\t" + strings.ToUpper(f)
		}
		fmt.Fprintln(tw, header)
		for _, row := range r.Rows {
			line := row.Name
			for _, f := range append(slices.Clone(meminfoFields), selfRSSField) {
				line += fmt.Sprintf("\t%.2f", row.Meminfo[f])
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Processes) > 0 {
		fmt.Fprintf(bw, "\nPss by process name, MiB per sandbox:\n")
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SUBJECT\tCOMMAND\tPROCS\tPSS")
		for _, p := range r.Processes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\n", p.Row, p.Comm, p.Procs, p.PssMiB)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	c := r.Cleanup
	fmt.Fprintf(bw, "\nafter deleting each set: %d containers, %d cgroups, %d mounts left\n", c.Containers, c.Cgroups, c.Mounts)
	writeTargets(bw, r.Targets)
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

// peerRow is the raw row of an Airlock row's runtime.
func (r DensityReport) peerRow(a DensityRow) (DensityRow, bool) {
	if a.Kind != KindAirlock {
		return DensityRow{}, false
	}
	for _, p := range r.Rows {
		if p.Kind == KindRaw && p.Runtime == a.Runtime {
			return p, true
		}
	}
	return DensityRow{}, false
}
