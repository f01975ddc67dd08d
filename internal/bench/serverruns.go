package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// ServerRuns are the options of the benches that measure rounds against
// in-process airlock servers, one per OCI runtime (fork, lifecycle).
type ServerRuns struct {
	// Runtimes are the OCI runtimes measured, each with its own in-process
	// server (default runc and runsc).
	Runtimes []string
	Runs     int // counted rounds per runtime (default: the bench's own)
	Warmup   int // uncounted rounds before them
	// AgentBinary is the static airlock-agent the servers use (required).
	AgentBinary string
	TempDir     string    // default os.TempDir()
	Progress    io.Writer // a line per runtime and round; nil: none
	ServerLog   io.Writer // the servers' logs; nil: discarded
}

// check fills in the defaults (defaultRuns counted rounds) and refuses what
// cannot run.
func (o *ServerRuns) check(defaultRuns int) error {
	if len(o.Runtimes) == 0 {
		o.Runtimes = []string{string(oci.FlavorRunc), string(oci.FlavorRunsc)}
	}
	for _, r := range o.Runtimes {
		if _, err := oci.ParseFlavor(r); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if o.Runs == 0 {
		o.Runs = defaultRuns
	}
	if o.Runs < 1 || o.Warmup < 0 {
		return fmt.Errorf("bench: runs (%d) must be at least 1 and warm-up runs (%d) not negative", o.Runs, o.Warmup)
	}
	return checkServerHost(o.AgentBinary, &o.TempDir, &o.Progress, &o.ServerLog)
}

// checkServerHost is what every bench that starts airlock servers needs:
// an agent binary, a temporary directory, writers for progress and the
// servers' logs (nil: discarded) and root.
func checkServerHost(agentBinary string, tempDir *string, progress, serverLog *io.Writer) error {
	if agentBinary == "" {
		return errors.New("bench: the airlock-agent binary is required")
	}
	if *tempDir == "" {
		*tempDir = os.TempDir()
	}
	if *progress == nil {
		*progress = io.Discard
	}
	if *serverLog == nil {
		*serverLog = io.Discard
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return nil
}

// eachRuntime runs run once per runtime of o, in order, each against an
// airlock server of that runtime on a data directory of its own below a
// temporary directory named after prefix (all removed when it returns);
// bench names the benchmark in the progress lines. It stops at the first
// error.
func (o ServerRuns) eachRuntime(ctx context.Context, bench, prefix string, run func(flavor oci.Flavor, a *airlockSubject) error) (err error) {
	tmp, err := os.MkdirTemp(o.TempDir, prefix)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: %w", rerr))
		}
	}()
	// runc and crun sandboxes run as unprivileged host users that must
	// reach their state directories below it.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	serverLog := slog.New(slog.NewTextHandler(o.ServerLog, nil))
	for _, name := range o.Runtimes {
		if err := o.onServer(ctx, bench, oci.Flavor(name), filepath.Join(tmp, name), serverLog, run); err != nil {
			return err
		}
	}
	return nil
}

// onServer starts an airlock server of flavor on dir, has run measure it
// and stops it.
func (o ServerRuns) onServer(ctx context.Context, bench string, flavor oci.Flavor, dir string, serverLog *slog.Logger,
	run func(flavor oci.Flavor, a *airlockSubject) error) (err error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(o.Progress, "bench %s: starting an airlock server on %s\n", bench, flavor)
	a, err := startAirlock(ctx, flavor, dir, o.AgentBinary, serverLog, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.stop()) }()
	return run(flavor, a)
}
