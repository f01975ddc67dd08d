package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// LifecycleOptions configures RunLifecycle.
type LifecycleOptions struct {
	ServerRuns // Runs defaults to 20
}

// LifecycleSubject is one runtime's figures. Every duration is the API's
// view: from the request to the operation's success (a long poll), or, for
// the first-output figures, to the first stdout event of `echo hello`.
type LifecycleSubject struct {
	Runtime string `json:"runtime"`
	// Snapshot is what a suspend keeps there: memory (processes continue)
	// or filesystem (the sandbox boots again on wake).
	Snapshot string `json:"snapshot"`
	Pause    Stats  `json:"pause"`
	Resume   Stats  `json:"resume"`
	Suspend  Stats  `json:"suspend"`
	Wake     Stats  `json:"wake"`
	// WakeFirstOutput: wake request → first output of a new command.
	WakeFirstOutput Stats `json:"wake_first_output"`
	// ColdFirstOutput: create request → first output of a new command,
	// measured in the same rounds.
	ColdFirstOutput Stats `json:"cold_first_output"`
	// WakeOverCold is WakeFirstOutput's p50 over ColdFirstOutput's.
	WakeOverCold float64 `json:"wake_over_cold_p50"`
}

// LifecycleReport is the result of RunLifecycle.
type LifecycleReport struct {
	StartedAt time.Time          `json:"started_at"`
	Runs      int                `json:"runs"`
	Subjects  []LifecycleSubject `json:"subjects"`
	// Met says, per target of the lifecycle issue, whether it was met
	// (targets of runtimes not measured are absent).
	Met map[string]bool `json:"targets_met"`
}

func (o *LifecycleOptions) check() error { return o.ServerRuns.check(20) }

// RunLifecycle runs `airlock bench lifecycle`: for each runtime an
// in-process airlock server, and per round one sandbox taken through pause,
// resume, suspend and wake (each timed from the request to the operation's
// success), then a command's first output after the wake, against a cold
// create's first output in the same round. Everything it creates is
// removed when it returns.
func RunLifecycle(ctx context.Context, opts LifecycleOptions) (rep LifecycleReport, err error) {
	if err := opts.check(); err != nil {
		return rep, err
	}
	rep = LifecycleReport{StartedAt: time.Now().UTC(), Runs: opts.Runs, Met: map[string]bool{}}
	err = opts.eachRuntime(ctx, "lifecycle", "airlock-bench-lc-", func(flavor oci.Flavor, a *airlockSubject) error {
		subj, err := runLifecycleOn(ctx, flavor, a, opts)
		if err != nil {
			return err
		}
		rep.Subjects = append(rep.Subjects, subj)
		switch flavor {
		case oci.FlavorRunsc:
			rep.Met["runsc_wake_p50_le_150ms"] = subj.Wake.P50 <= 150*time.Millisecond
		case oci.FlavorRunc:
			rep.Met["runc_pause_p50_le_10ms"] = subj.Pause.P50 <= 10*time.Millisecond
			rep.Met["runc_resume_p50_le_10ms"] = subj.Resume.P50 <= 10*time.Millisecond
		}
		return nil
	})
	return rep, err
}

func runLifecycleOn(ctx context.Context, flavor oci.Flavor, a *airlockSubject, opts LifecycleOptions) (subj LifecycleSubject, err error) {
	subj.Runtime = string(flavor)
	var pause, resume, suspend, wake, wakeOut, cold []time.Duration
	for i := range opts.Warmup + opts.Runs {
		counted := i >= opts.Warmup
		r, err := a.lifecycleRound(ctx)
		if err != nil {
			return subj, fmt.Errorf("bench: %s round %d: %w", flavor, i+1, err)
		}
		coldSample, err := a.once(ctx)
		if err != nil {
			return subj, fmt.Errorf("bench: %s round %d: cold create: %w", flavor, i+1, err)
		}
		subj.Snapshot = r.snapshot
		if counted {
			pause, resume, suspend, wake = append(pause, r.pause), append(resume, r.resume), append(suspend, r.suspend), append(wake, r.wake)
			wakeOut, cold = append(wakeOut, r.wakeOut), append(cold, coldSample.total)
		}
		fmt.Fprintf(opts.Progress, "bench lifecycle: %s round %d/%d: pause %s resume %s suspend %s wake %s wake→output %s cold→output %s\n",
			flavor, i+1, opts.Warmup+opts.Runs, r.pause.Round(time.Microsecond), r.resume.Round(time.Microsecond), r.suspend.Round(time.Microsecond),
			r.wake.Round(time.Microsecond), r.wakeOut.Round(time.Microsecond), coldSample.total.Round(time.Microsecond))
	}
	subj.Pause, subj.Resume, subj.Suspend, subj.Wake = Summarize(pause), Summarize(resume), Summarize(suspend), Summarize(wake)
	subj.WakeFirstOutput, subj.ColdFirstOutput = Summarize(wakeOut), Summarize(cold)
	subj.WakeOverCold = RatioOf(subj.WakeFirstOutput.P50, subj.ColdFirstOutput.P50)
	return subj, nil
}

// lifecycleSample is one round's figures on one sandbox.
type lifecycleSample struct {
	pause, resume, suspend, wake, wakeOut time.Duration
	snapshot                              string
}

// lifecycleRound creates a sandbox (untimed), takes it through pause,
// resume, suspend and wake, runs echo in it, and deletes it.
func (a *airlockSubject) lifecycleRound(ctx context.Context) (r lifecycleSample, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*airlockRunTimeout)
	defer cancel()
	created, err := a.c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
	if err != nil {
		return r, err
	}
	id, err := model.ParseSandboxID(created.Sandbox.ID)
	if err != nil {
		return r, fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	defer func() {
		if derr := a.deleteSandbox(context.WithoutCancel(ctx), id); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := a.waitOperation(ctx, created.Operation); err != nil {
		return r, fmt.Errorf("create: %w", err)
	}
	for _, step := range []struct {
		kind model.OperationKind
		took *time.Duration
	}{
		{model.OpPause, &r.pause}, {model.OpResume, &r.resume}, {model.OpSuspend, &r.suspend}, {model.OpWake, &r.wake},
	} {
		t0 := time.Now()
		if err := a.lifecycle(ctx, step.kind, id); err != nil {
			return r, fmt.Errorf("%s: %w", step.kind, err)
		}
		*step.took = time.Since(t0)
		if step.kind == model.OpSuspend {
			sb, err := a.c.GetSandbox(ctx, id)
			if err != nil {
				return r, err
			}
			if sb.Snapshot != nil {
				r.snapshot = sb.Snapshot.Kind
			}
		}
	}
	// The wake's first output: from the wake request (r.wake ago) to the
	// first stdout of a new command.
	t0 := time.Now()
	cs, err := a.c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: peerArgs()})
	if err != nil {
		return r, err
	}
	first, out, err := a.attach(ctx, cs)
	if err != nil {
		return r, err
	}
	if out != peerOutput {
		return r, fmt.Errorf("sandbox %s printed %q after its wake, want %q", id, out, peerOutput)
	}
	r.wakeOut = r.wake + first.Sub(t0)
	return r, nil
}

// waitOperation waits for an operation the API returned and fails unless
// it succeeded.
func (a *airlockSubject) waitOperation(ctx context.Context, op apiv1.Operation) error {
	opID, err := model.ParseOperationID(op.ID)
	if err != nil {
		return fmt.Errorf("the server returned a bad operation ID: %w", err)
	}
	_, err = a.c.WaitOperation(ctx, opID) // an operation that failed is an *OperationFailedError
	return err
}

// lifecycle requests a pause, resume, suspend or wake and waits for it.
func (a *airlockSubject) lifecycle(ctx context.Context, kind model.OperationKind, id model.SandboxID) error {
	res, err := a.c.LifecycleSandbox(ctx, id, kind)
	if err != nil {
		return err
	}
	return a.waitOperation(ctx, res.Operation)
}

// WriteJSON writes the report as indented JSON.
func (r LifecycleReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r LifecycleReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "lifecycle: request → operation done (API, long poll), %d runs each\n", r.Runs)
	fmt.Fprintln(tw, "RUNTIME\tSTEP\tP50\tP95\tMIN\tMAX")
	for _, s := range r.Subjects {
		for _, row := range []struct {
			name string
			st   Stats
		}{
			{"pause", s.Pause}, {"resume", s.Resume}, {"suspend (" + s.Snapshot + ")", s.Suspend}, {"wake", s.Wake},
			{"wake → first output", s.WakeFirstOutput}, {"cold create → first output", s.ColdFirstOutput},
		} {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Runtime, row.name, formatDuration(row.st.P50), formatDuration(row.st.P95),
				formatDuration(row.st.Min), formatDuration(row.st.Max))
		}
		fmt.Fprintf(tw, "%s\twake→output / cold→output (p50)\t%.2f×\t\t\t\n", s.Runtime, s.WakeOverCold)
	}
	fmt.Fprintln(tw)
	for _, k := range []string{"runc_pause_p50_le_10ms", "runc_resume_p50_le_10ms", "runsc_wake_p50_le_150ms"} {
		if met, ok := r.Met[k]; ok {
			fmt.Fprintf(tw, "target %s\t%v\n", k, met)
		}
	}
	return tw.Flush()
}
