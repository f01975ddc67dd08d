package control

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// checkFilesystemSuspend refuses (501) a create whose deadline is to
// suspend without memory (lifecycle onTimeout pause, keepMemory false)
// when the environment it would run in, the default, suspends with memory
// (runsc, qemu): the deadline's suspend keeps what the environment keeps
// by default, which is what the caller said not to keep. runc and crun
// suspend keeping only the filesystem: honoured. (pause({keepMemory:
// false}) itself is honoured on runsc too: a native suspend with
// keep_memory false.)
func checkFilesystemSuspend(ctx context.Context, c *client.Client) error {
	list, err := c.ListEnvironments(ctx)
	if err != nil {
		return fmt.Errorf("list environments: %w", err)
	}
	for _, e := range list.Environments {
		if !e.Default {
			continue
		}
		if e.Snapshot == apiv1.SnapshotFilesystem {
			return nil
		}
		return notImplemented("lifecycle onTimeout pause with keepMemory: false is not supported: sandboxes here run on %s, whose deadline pause (suspend) keeps memory and processes; use keepMemory: true, call pause({keepMemory: false}) yourself, or use a server whose default environment is runc or crun", e.Name)
	}
	return notImplemented("lifecycle onTimeout pause with keepMemory: false is not supported: this server has no default environment to check")
}
