package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r BurstReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report for humans.
func (r BurstReport) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fill := "the server's default"
	if r.FillParallel > 0 {
		fill = fmt.Sprint(r.FillParallel)
	}
	fmt.Fprintf(bw, "runtime %s, template %s, 1 CPU and %d MiB per sandbox, pool fill parallelism %s\n\n",
		r.Runtime, r.Template, r.MemoryMiB, fill)

	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tSANDBOXES\tTIME\tPER SECOND\tP50\tP95\tP99\tMAX")
	fmt.Fprintf(tw, "pool fill (PUT /v1/pools → all ready)\t%d\t%s\t%.1f/s\t-\t-\t-\t-\n",
		r.Fill.Sandboxes, formatDuration(r.Fill.Duration), r.Fill.PerSecond)
	b := r.Burst
	fmt.Fprintf(tw, "burst from the full pool, %d clients\t%d (%d pool, %d cold)\t%s\t%.1f/s\t%s\t%s\t%s\t%s\n",
		b.Clients, b.Creates, b.Hits, b.Misses, formatDuration(b.Rate.Duration), b.Rate.PerSecond,
		formatDuration(b.Latency.P50), formatDuration(b.Latency.P95), formatDuration(b.Latency.P99), formatDuration(b.Latency.Max))
	fmt.Fprintf(tw, "refill after the burst (%d ready at its end)\t%d\t%s\t%.1f/s\t-\t-\t-\t-\n",
		b.ReadyAtEnd, r.Refill.Sandboxes, formatDuration(r.Refill.Duration), r.Refill.PerSecond)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(bw, "  burst: each create timed from its POST to its sandbox running (the response of a claim, the operation's success of a cold create);\n")
	fmt.Fprintf(bw, "  per second = creates / (first POST → last sandbox running); pool hits alone: p50 %s, p95 %s\n",
		formatDuration(b.HitLatency.P50), formatDuration(b.HitLatency.P95))
	fmt.Fprintf(bw, "  refill: from the burst's end until the pool had its size ready again, the burst's sandboxes still running\n")

	if len(r.Sustained) > 0 {
		fmt.Fprintf(bw, "\nSustained cold creates (no pool), N concurrent clients, each create → running; degraded: p95 > %.1f× the first step's p95\n", r.Degrade)
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENTS\tCREATES\tTIME\tPER SECOND\tP50\tP95\tP99\tMAX\tDEGRADED")
		for _, s := range r.Sustained {
			deg := "no"
			if s.Degraded {
				deg = "yes"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%.1f/s\t%s\t%s\t%s\t%s\t%s\n", s.Clients, s.Creates,
				formatDuration(s.Rate.Duration), s.Rate.PerSecond, formatDuration(s.Latency.P50),
				formatDuration(s.Latency.P95), formatDuration(s.Latency.P99), formatDuration(s.Latency.Max), deg)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(bw, "sustained cold creates: %.1f/s at best before degrading; burst from the pool over it: %.2f×\n",
			r.SustainedBest, ratioFloat(b.Rate.PerSecond, r.SustainedBest))
	}
	writeTargets(bw, r.Targets)
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

// ratioFloat is a/b, 0 when b is not positive.
func ratioFloat(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
