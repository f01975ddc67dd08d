package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// ForkOptions configures RunFork.
type ForkOptions struct {
	ServerRuns // Runs defaults to 10
	// Count is how many sandboxes each fork makes (default 2, at most
	// model.MaxForkCount).
	Count int
}

// ForkSubject is one runtime's figures, each from a request to the first
// stdout event of `echo hello` in the new sandbox.
type ForkSubject struct {
	Runtime string `json:"runtime"`
	// Kind is what a snapshot keeps there: memory or filesystem.
	Kind string `json:"kind"`
	// Snapshot: POST /v1/sandboxes/{id}/snapshots → ready (not a
	// first-output figure; made once per round of the fork's source).
	Snapshot Stats `json:"snapshot"`
	// FromSnapshot: a create with "snapshot" → first output.
	FromSnapshot Stats `json:"from_snapshot_first_output"`
	// Fork: POST …/fork {count} → first output of each clone (Count
	// samples per round).
	Fork Stats `json:"fork_first_output"`
	// Cold: a cold create → first output, in the same rounds.
	Cold Stats `json:"cold_first_output"`
	// Ratios of the p50s over Cold's.
	FromSnapshotOverCold float64 `json:"from_snapshot_over_cold_p50"`
	ForkOverCold         float64 `json:"fork_over_cold_p50"`
}

// ForkReport is the result of RunFork.
type ForkReport struct {
	StartedAt time.Time     `json:"started_at"`
	Runs      int           `json:"runs"`
	Count     int           `json:"count"`
	Subjects  []ForkSubject `json:"subjects"`
}

func (o *ForkOptions) check() error {
	if o.Count == 0 {
		o.Count = 2
	}
	if err := model.CheckForkCount(o.Count); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return o.ServerRuns.check(10)
}

// RunFork runs `airlock bench fork`: for each runtime an in-process
// airlock server with one running source sandbox, and per round, in an
// order that rotates: a cold create → first output, a saved snapshot of
// the source then a create from it → first output, and a fork of Count
// sandboxes → first output of each. Everything it creates is removed when
// it returns.
func RunFork(ctx context.Context, opts ForkOptions) (rep ForkReport, err error) {
	if err := opts.check(); err != nil {
		return rep, err
	}
	rep = ForkReport{StartedAt: time.Now().UTC(), Runs: opts.Runs, Count: opts.Count}
	err = opts.eachRuntime(ctx, "fork", "airlock-bench-fork-", func(flavor oci.Flavor, a *airlockSubject) error {
		subj, err := runForkOn(ctx, flavor, a, opts)
		if err == nil {
			rep.Subjects = append(rep.Subjects, subj)
		}
		return err
	})
	return rep, err
}

func runForkOn(ctx context.Context, flavor oci.Flavor, a *airlockSubject, opts ForkOptions) (subj ForkSubject, err error) {
	subj.Runtime = string(flavor)
	src, err := a.forkSource(ctx)
	if err != nil {
		return subj, fmt.Errorf("bench: %s: the source sandbox: %w", flavor, err)
	}
	defer func() {
		if derr := a.deleteSandbox(context.WithoutCancel(ctx), src); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	var snap, fromSnap, fork, cold []time.Duration
	for i := range opts.Warmup + opts.Runs {
		counted := i >= opts.Warmup
		var r forkRound
		steps := []func() error{
			func() error { s, err := a.once(ctx); r.cold = s.total; return err },
			func() error { return a.snapshotRound(ctx, src, &r) },
			func() error { return a.forkRound(ctx, src, opts.Count, &r) },
		}
		for j := range steps {
			if err := steps[(i+j)%len(steps)](); err != nil {
				return subj, fmt.Errorf("bench: %s round %d: %w", flavor, i+1, err)
			}
		}
		subj.Kind = r.kind
		if counted {
			snap, fromSnap, cold = append(snap, r.snapshot), append(fromSnap, r.fromSnapshot), append(cold, r.cold)
			fork = append(fork, r.fork...)
		}
		fmt.Fprintf(opts.Progress, "bench fork: %s round %d/%d: snapshot %s from-snapshot→output %s fork→output %v cold→output %s\n",
			flavor, i+1, opts.Warmup+opts.Runs, r.snapshot.Round(time.Microsecond), r.fromSnapshot.Round(time.Microsecond), r.fork,
			r.cold.Round(time.Microsecond))
	}
	subj.Snapshot, subj.FromSnapshot, subj.Fork, subj.Cold = Summarize(snap), Summarize(fromSnap), Summarize(fork), Summarize(cold)
	subj.FromSnapshotOverCold = RatioOf(subj.FromSnapshot.P50, subj.Cold.P50)
	subj.ForkOverCold = RatioOf(subj.Fork.P50, subj.Cold.P50)
	return subj, nil
}

// forkRound is one round's figures.
type forkRound struct {
	snapshot, fromSnapshot, cold time.Duration
	fork                         []time.Duration
	kind                         string
}

// forkSource creates the running sandbox every snapshot and fork is of.
func (a *airlockSubject) forkSource(ctx context.Context) (model.SandboxID, error) {
	ctx, cancel := context.WithTimeout(ctx, airlockRunTimeout)
	defer cancel()
	created, err := a.c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Environment: string(a.flavor)})
	if err != nil {
		return "", err
	}
	id, err := model.ParseSandboxID(created.Sandbox.ID)
	if err != nil {
		return "", fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	if err := a.waitOperation(ctx, created.Operation); err != nil {
		return "", errors.Join(fmt.Errorf("create: %w", err), a.deleteSandbox(context.WithoutCancel(ctx), id))
	}
	return id, nil
}

// snapshotRound takes a saved snapshot of src (timed to ready), times a
// create from it → first output, and deletes the snapshot.
func (a *airlockSubject) snapshotRound(ctx context.Context, src model.SandboxID, r *forkRound) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*airlockRunTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := a.c.SnapshotSandbox(ctx, src, apiv1.SnapshotRequest{})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	snp, err := model.ParseSnapshotID(res.Snapshot.ID)
	if err != nil {
		return fmt.Errorf("the server returned a bad snapshot ID: %w", err)
	}
	defer func() {
		if _, derr := a.c.DeleteSnapshot(context.WithoutCancel(ctx), snp); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete snapshot %s: %w", snp, derr))
		}
	}()
	if err := a.waitOperation(ctx, res.Operation); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	r.snapshot = time.Since(t0)
	got, err := a.c.GetSnapshot(ctx, snp)
	if err != nil {
		return err
	}
	r.kind = got.Kind
	s, err := a.createAndEcho(ctx, apiv1.CreateSandboxRequest{Snapshot: snp.String()}, "")
	if err != nil {
		return fmt.Errorf("create from snapshot: %w", err)
	}
	r.fromSnapshot = s.total
	return nil
}

// forkRound forks src into count sandboxes and times, for each, the fork
// request → the first output of echo in it; the forks are deleted.
func (a *airlockSubject) forkRound(ctx context.Context, src model.SandboxID, count int, r *forkRound) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*airlockRunTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := a.c.ForkSandbox(ctx, src, apiv1.ForkRequest{Count: count})
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	r.fork = make([]time.Duration, len(res.Sandboxes))
	errs := make([]error, len(res.Sandboxes))
	var wg sync.WaitGroup
	for i, made := range res.Sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.forkClone(ctx, made, t0, &r.fork[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forkClone waits for one fork, times echo's first output in it from t0,
// and deletes it.
func (a *airlockSubject) forkClone(ctx context.Context, made apiv1.SandboxWithOperation, t0 time.Time, took *time.Duration) (err error) {
	id, err := model.ParseSandboxID(made.Sandbox.ID)
	if err != nil {
		return fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	defer func() {
		if derr := a.deleteSandbox(context.WithoutCancel(ctx), id); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := a.waitOperation(ctx, made.Operation); err != nil {
		return fmt.Errorf("fork %s: %w", id, err)
	}
	cs, err := a.c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: peerArgs()})
	if err != nil {
		return err
	}
	first, out, err := a.attach(ctx, cs)
	if err != nil {
		return err
	}
	if out != peerOutput {
		return fmt.Errorf("fork %s printed %q, want %q", id, out, peerOutput)
	}
	*took = first.Sub(t0)
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r ForkReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r ForkReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "fork: request → first output of echo, %d rounds each, forks of %d\n", r.Runs, r.Count)
	fmt.Fprintln(tw, "RUNTIME\tSTEP\tP50\tP95\tMIN\tMAX")
	for _, s := range r.Subjects {
		for _, row := range []struct {
			name string
			st   Stats
		}{
			{"snapshot → ready (" + s.Kind + ")", s.Snapshot}, {"create from snapshot → first output", s.FromSnapshot},
			{"fork → first output of each clone", s.Fork}, {"cold create → first output", s.Cold},
		} {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Runtime, row.name, formatDuration(row.st.P50), formatDuration(row.st.P95),
				formatDuration(row.st.Min), formatDuration(row.st.Max))
		}
		fmt.Fprintf(tw, "%s\tfrom snapshot / cold (p50)\t%.2f×\t\t\t\n", s.Runtime, s.FromSnapshotOverCold)
		fmt.Fprintf(tw, "%s\tfork / cold (p50)\t%.2f×\t\t\t\n", s.Runtime, s.ForkOverCold)
	}
	return tw.Flush()
}
