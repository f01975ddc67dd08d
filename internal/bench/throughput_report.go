package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// Directions of a throughput measurement.
const (
	DirStdout   = "stdout"   // process output to the client
	DirStdin    = "stdin"    // client to the process's input
	DirUpload   = "upload"   // client to a file in the sandbox
	DirDownload = "download" // a file in the sandbox to the client
)

// ThroughputReport is the result of `airlock bench throughput`.
type ThroughputReport struct {
	Benchmark string          `json:"benchmark"`
	StartedAt time.Time       `json:"started_at"`
	Bytes     int64           `json:"bytes"` // per transfer
	Runs      int             `json:"runs"`  // counted transfers per row
	Warmup    int             `json:"warmup"`
	Seed      uint64          `json:"seed"`
	Memory    string          `json:"memory"` // what the memory column means
	Host      HostFacts       `json:"host"`
	Rows      []ThroughputRow `json:"rows"`
	Skipped   []Skipped       `json:"skipped"`
}

// ThroughputRow is one subject in one direction.
type ThroughputRow struct {
	Subject   string `json:"subject"` // "airlock-runc", "runc exec", …
	Kind      string `json:"kind"`    // KindAirlock or KindRaw
	Runtime   string `json:"runtime"`
	Direction string `json:"direction"`
	Method    string `json:"method"`
	// Time is the duration of one transfer of Bytes.
	Time Stats `json:"time"`
	// MBps are the rates in MB/s (10^6 bytes per second).
	MBps Rates `json:"mb_per_s"`
	// PeakRSSGrowth is the largest growth of this process's peak RSS
	// over its RSS before a transfer, in bytes.
	PeakRSSGrowth int64 `json:"peak_rss_growth_bytes"`
	// Verified says every transfer was checked byte for byte (length and
	// SHA-256 on both sides).
	Verified bool `json:"verified"`
}

// Rates summarise transfer rates.
type Rates struct {
	P50   float64 `json:"p50"`   // at the median time
	Worst float64 `json:"worst"` // at the longest time
	Best  float64 `json:"best"`  // at the shortest time
}

// MBps returns the rate of moving n bytes in d, in MB/s (10^6 bytes per
// second); 0 if d is not positive.
func MBps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e6
}

// summarizeRates derives the rates of moving n bytes from time statistics.
func summarizeRates(n int64, st Stats) Rates {
	return Rates{P50: MBps(n, st.P50), Worst: MBps(n, st.Max), Best: MBps(n, st.Min)}
}

// newThroughputRow summarises the samples of one subject and direction.
func newThroughputRow(base ThroughputRow, n int64, times []time.Duration, peaks []int64) ThroughputRow {
	r := base
	r.Time = Summarize(times)
	r.MBps = summarizeRates(n, r.Time)
	for _, p := range peaks {
		r.PeakRSSGrowth = max(r.PeakRSSGrowth, p)
	}
	r.Verified = len(times) > 0
	return r
}

// formatBytes renders a byte count with a binary unit.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for math.Abs(f) >= unit && i < 3 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGT"[i])
}

// WriteTable writes the report for humans.
func (r ThroughputReport) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fmt.Fprintf(bw, "%s per transfer, %d counted transfers per row after %d warm-up; seed %d\n\n", formatBytes(r.Bytes), r.Runs, r.Warmup, r.Seed)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tDIRECTION\tN\tMB/s P50\tWORST\tBEST\tTIME P50\tPEAK RSS GROWTH\tVERIFIED")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%v\n", x.Subject, x.Direction, x.Time.N,
			x.MBps.P50, x.MBps.Worst, x.MBps.Best, formatDuration(x.Time.P50), formatBytes(x.PeakRSSGrowth), x.Verified)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(bw, "%s: %s, skipped\n", s.Name, s.Reason)
	}
	fmt.Fprintf(bw, "\nPeak RSS growth: %s\n", r.Memory)
	fmt.Fprintf(bw, "\nWhat was timed:\n")
	for _, x := range r.Rows {
		fmt.Fprintf(bw, "  %s %s: %s\n", x.Subject, x.Direction, x.Method)
	}
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

// WriteJSON writes the report as indented JSON.
func (r ThroughputReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
