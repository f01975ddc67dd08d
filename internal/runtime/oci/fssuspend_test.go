package oci

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// TestSuspendFilesystemRunsc: runsc's filesystem-only suspend keeps the
// sandbox's files and not its processes, writes no checkpoint, is
// idempotent, is finished after a crash that stopped it half-way (a new
// Runtime value), and its wake is a fresh container over the kept files.
func TestSuspendFilesystemRunsc(t *testing.T) {
	for _, tc := range []struct {
		name  string
		disk  int64
		crash bool
	}{
		{"overlay", 0, false},
		{"disk image, crashed after the container stopped", 64 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fx := newSuspendFixture(t, FlavorRunsc, tc.disk)
			ctx := testCtx(t)
			id := fx.spec.ID
			c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, slog.New(slog.DiscardHandler))
			bg := model.NewProcessID().String()
			if _, err := c.Start(ctx, agentproto.StartRequest{ID: bg, Args: []string{"sleep", "600"}}); err != nil {
				t.Fatalf("start the background process: %v", err)
			}
			c.Close()
			// A file written and not closed by a shell that then exits.
			runIn(t, r, id, "sh", "-c", "printf 'line1\\nline2\\n' > /etc/written.txt")

			dirs := r.dirs(id)
			if tc.crash {
				// A suspend that crashed after it stopped the container,
				// before its manifest: a restarted server finishes it.
				if err := writeFileAtomic(filepath.Join(dirs.state, suspendingName), nil); err != nil {
					t.Fatal(err)
				}
				if err := r.releaseRunning(ctx, id); err != nil {
					t.Fatal(err)
				}
				var err error
				if r, err = New(fx.cfg); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := r.SuspendFilesystem(ctx, id)
			if err != nil {
				t.Fatalf("SuspendFilesystem: %v", err)
			}
			if snap.Kind != model.SnapshotFilesystem || snap.Format != FormatRunscUpper || snap.Location != dirs.state {
				t.Fatalf("snapshot = %+v, want a filesystem snapshot in format %s at %s", snap, FormatRunscUpper, dirs.state)
			}
			if dirExists(filepath.Join(dirs.state, checkpointName)) {
				t.Fatal("a filesystem suspend wrote a checkpoint")
			}
			if _, err := r.State(ctx, id); err == nil {
				t.Fatal("State finds a container after the suspend")
			}
			// Idempotent, whichever suspend asks again.
			for name, again := range map[string]func(context.Context, model.SandboxID) (runtime.Snapshot, error){"SuspendFilesystem": r.SuspendFilesystem, "Suspend": r.Suspend} {
				if got, err := again(ctx, id); err != nil || got != snap {
					t.Fatalf("%s of the suspended sandbox = %+v, %v; want %+v", name, got, err, snap)
				}
			}
			// A memory restore of it is refused.
			wrong := fx.spec
			mem := snap
			mem.Kind, mem.Format = model.SnapshotMemory, FormatRunscCheckpoint
			wrong.Restore = &mem
			if err := r.Create(ctx, wrong); err == nil {
				t.Fatal("Create restoring the filesystem snapshot as a checkpoint succeeded")
			}

			wake := fx.spec
			wake.Restore = &snap
			if err := r.Create(ctx, wake); err != nil {
				t.Fatalf("Create with Restore: %v", err)
			}
			if err := r.Start(ctx, id); err != nil {
				t.Fatalf("Start: %v", err)
			}
			if got := runIn(t, r, id, "cat", "/kept.txt", "/etc/written.txt"); got != "kept\nline1\nline2\n" {
				t.Fatalf("files after wake = %q", got)
			}
			if err := r.ForgetSnapshot(ctx, id); err != nil {
				t.Fatal(err)
			}
			if hasSnapshot(dirs) {
				t.Fatal("the snapshot's files stay after ForgetSnapshot")
			}
			if ps := runIn(t, r, id, "ps", "-o", "args"); strings.Contains(ps, "sleep 600") {
				t.Fatalf("the background process survived a filesystem suspend:\n%s", ps)
			}
			c = agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, slog.New(slog.DiscardHandler))
			defer c.Close()
			if st, err := c.Status(ctx, bg); err == nil {
				t.Fatalf("the agent knows the background process after wake: %+v", st)
			}
			if _, err := os.Stat(filepath.Join(dirs.state, suspendingName)); err == nil {
				t.Fatal("suspending left after the wake")
			}
		})
	}
}
