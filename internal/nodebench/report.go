package nodebench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Report is a run's result.
type Report struct {
	Creates        int           `json:"creates_per_step"`
	Clients        int           `json:"clients"`
	Projects       int           `json:"projects"`
	Parallel       int           `json:"controller_parallel"`
	PlacementCache time.Duration `json:"placement_cache_ns"`
	Analyze        time.Duration `json:"analyze_ns"`
	Steps          []Step        `json:"steps"`
}

// Step is one node count's result.
type Step struct {
	Nodes   int `json:"nodes"`
	Creates int `json:"creates"`
	// PlacedPerSec: creates whose row committed with a node, per second
	// from the first request to the last commit; ClaimedPerSec: creates
	// whose operation succeeded on their node, per second from the first
	// request to the last success.
	PlacedPerSec  float64 `json:"placed_per_sec"`
	ClaimedPerSec float64 `json:"claimed_per_sec"`
	// Latencies from a create's request: to its row committed (placement,
	// its Place calls and inserts, retries included) and to its operation
	// succeeded (claim).
	PlaceP50 time.Duration `json:"place_p50_ns"`
	PlaceP95 time.Duration `json:"place_p95_ns"`
	ClaimP50 time.Duration `json:"claim_p50_ns"`
	ClaimP95 time.Duration `json:"claim_p95_ns"`
	// Retries: placements the store refused (ErrNodeFull), placed again.
	Retries int64 `json:"retries"`
	// MinPerNode and MaxPerNode: sandboxes on the emptiest and the fullest
	// node.
	MinPerNode int `json:"min_per_node"`
	MaxPerNode int `json:"max_per_node"`
	// Failed creates, claims of a sandbox more than once, sandboxes
	// finished by another node than the one they were placed on.
	Failed      int    `json:"failed"`
	DoubleClaim int    `json:"double_claimed"`
	WrongNode   int    `json:"wrong_node"`
	Check       string `json:"check"`
}

// summarize computes a step's figures from its tracker.
func summarize(nodes int, start time.Time, tr *tracker, retries int64) Step {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	st := Step{Nodes: nodes, Creates: len(tr.ops), Retries: retries}
	var place, claim []time.Duration
	var lastPlaced, lastDone time.Time
	perNode := map[model.NodeID]int{}
	for _, r := range tr.ops {
		place = append(place, r.placed.Sub(r.requested))
		claim = append(claim, r.finished.Sub(r.requested))
		if r.placed.After(lastPlaced) {
			lastPlaced = r.placed
		}
		if r.finished.After(lastDone) {
			lastDone = r.finished
		}
		if r.state != model.OpSucceeded {
			st.Failed++
		}
		if r.claims > 1 {
			st.DoubleClaim++
		}
		if r.finishedBy != r.node || r.claimedBy != r.node {
			st.WrongNode++
		}
		perNode[r.finishedBy]++
	}
	st.DoubleClaim += tr.unknown
	if st.Creates > 0 {
		st.PlacedPerSec = float64(st.Creates) / lastPlaced.Sub(start).Seconds()
		st.ClaimedPerSec = float64(st.Creates) / lastDone.Sub(start).Seconds()
	}
	st.PlaceP50, st.PlaceP95 = quantile(place, 0.50), quantile(place, 0.95)
	st.ClaimP50, st.ClaimP95 = quantile(claim, 0.50), quantile(claim, 0.95)
	counts := make([]int, 0, nodes)
	for _, c := range perNode {
		counts = append(counts, c)
	}
	for len(counts) < nodes {
		counts = append(counts, 0) // a node that got nothing
	}
	st.MinPerNode, st.MaxPerNode = slices.Min(counts), slices.Max(counts)
	return st
}

// quantile is the nearest-rank q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// WriteTable writes one row per step.
func (r *Report) WriteTable(w io.Writer) error {
	cache := "off"
	if r.PlacementCache > 0 {
		cache = r.PlacementCache.String()
	}
	analyze := "off"
	if r.Analyze > 0 {
		analyze = "every " + r.Analyze.String()
	}
	fmt.Fprintf(w, "%d creates per step from %d clients in %d projects; controller parallelism %d; placement node cache %s; ANALYZE %s\n\n",
		r.Creates, r.Clients, r.Projects, r.Parallel, cache, analyze)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tplaced/s\tclaimed/s\tplace p50\tplace p95\tclaim p50\tclaim p95\tretries\tper node min/max\tmax/min\tfailed\tdouble\t")
	for _, s := range r.Steps {
		ratio := "∞"
		if s.MinPerNode > 0 {
			ratio = fmt.Sprintf("%.2f", float64(s.MaxPerNode)/float64(s.MinPerNode))
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d/%d\t%s\t%d\t%d\t\n", s.Nodes, s.PlacedPerSec, s.ClaimedPerSec,
			ms(s.PlaceP50), ms(s.PlaceP95), ms(s.ClaimP50), ms(s.ClaimP95), s.Retries, s.MinPerNode, s.MaxPerNode, ratio,
			s.Failed, s.DoubleClaim)
	}
	return tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
