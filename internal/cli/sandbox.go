package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) sandboxCommand() *cobra.Command {
	return group("sandbox", "Create, list, inspect, pause, resume, suspend, wake and delete sandboxes",
		a.sandboxCreateCommand(), a.sandboxListCommand(), a.sandboxGetCommand(), a.sandboxDeleteCommand(),
		a.sandboxTimeoutCommand(), a.sandboxForkCommand(), a.sandboxMetricsCommand())
}

// createFlags are the sandbox spec flags of `sandbox create` and `run`.
type createFlags struct {
	template  string
	cpus      int
	memoryMiB int
	diskMiB   int
	env       []string
	metadata  []string
	egress    egressFlags
	timeouts  timeoutFlags
	// environment is --environment, the execution environment (an --env
	// value without '=' names it too).
	environment string
	// volumes are --volume VOLUME:/path, the volumes to mount.
	volumes []string
	// snapshot is --snapshot: start from a saved snapshot.
	snapshot string
	// publicPorts is --public-ports: guest ports answer without a
	// credential through the E2B gateway.
	publicPorts bool
	// nodeSelector is --node-selector KEY=VALUE: labels the sandbox's
	// node must carry.
	nodeSelector []string
}

func (f *createFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.template, "template", "", "template name or sha256: digest (default: the server's \"default\")")
	fs.IntVar(&f.cpus, "cpus", 0, "vCPUs (default: the server's, 1)")
	fs.IntVar(&f.memoryMiB, "memory-mib", 0, "memory limit in MiB (default: the server's, 512)")
	fs.IntVar(&f.diskMiB, "disk-mib", 0, "size of the writable layer in MiB (default: the server's --default-disk-mib)")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of the sandbox (repeatable); a value without '=' names the execution environment instead, as --environment")
	fs.StringVar(&f.environment, "environment", "", "execution environment: a name (runsc, crun, runc) or an env:sha256: reference, see `airlock env list` (default: the server's)")
	fs.StringArrayVar(&f.metadata, "metadata", nil, "metadata label KEY=VALUE (repeatable)")
	fs.StringArrayVar(&f.volumes, "volume", nil, "mount the project's volume VOLUME (name or ID) read-write at /path: VOLUME:/path (repeatable; see `airlock volume`)")
	fs.StringVar(&f.snapshot, "snapshot", "", "start from this saved snapshot (snp_…, see `airlock snapshot list`): its template, resources and environment")
	fs.BoolVar(&f.publicPorts, "public-ports", false, "let the sandbox's guest ports answer without a credential through the E2B gateway (https://PORT-ID.DOMAIN), as an E2B sandbox's do; fixed at create")
	fs.StringArrayVar(&f.nodeSelector, "node-selector", nil, "node label KEY=VALUE the node that runs the sandbox must carry (repeatable; nodes get theirs from `airlock server --label`)")
	f.egress.register(fs, "egress-profile", "egress-default")
	f.timeouts.register(fs)
}

// request parses the flags into a create request.
func (f *createFlags) request() (apiv1.CreateSandboxRequest, error) {
	var req apiv1.CreateSandboxRequest
	if f.template != "" {
		ref, err := model.ParseTemplateRef(f.template)
		if err != nil {
			return req, usageErrorf("--template: %w", err)
		}
		req.Template = ref.String()
	}
	if f.cpus < 0 {
		return req, usageErrorf("--cpus must be positive")
	}
	if f.memoryMiB < 0 {
		return req, usageErrorf("--memory-mib must be positive")
	}
	if f.diskMiB < 0 {
		return req, usageErrorf("--disk-mib must be positive")
	}
	req.CPUs, req.MemoryMiB, req.DiskMiB = f.cpus, f.memoryMiB, f.diskMiB
	vars, environment, err := splitEnvFlag(f.env, f.environment)
	if err != nil {
		return req, err
	}
	req.Environment = environment
	if req.Env, err = parseEnvFlag(vars); err != nil {
		return req, err
	}
	if req.Metadata, err = parseMetadataFlag(f.metadata); err != nil {
		return req, err
	}
	if req.VolumeMounts, err = parseVolumeFlags(f.volumes); err != nil {
		return req, err
	}
	sel, err := parseLabelFlag("--node-selector", f.nodeSelector)
	if err != nil {
		return req, err
	}
	req.NodeSelector = sel
	req.PublicPorts = f.publicPorts
	if err := f.timeouts.apply(&req); err != nil {
		return req, err
	}
	if f.snapshot != "" {
		id, err := model.ParseSnapshotID(f.snapshot)
		if err != nil {
			return req, usageErrorf("--snapshot: %w", err)
		}
		if req.Template != "" || req.CPUs != 0 || req.MemoryMiB != 0 || req.DiskMiB != 0 || req.Environment != "" {
			return req, usageErrorf("--snapshot cannot be given with --template, --cpus, --memory-mib, --disk-mib or --environment: the sandbox gets the snapshot's")
		}
		req.Snapshot = id.String()
	}
	if f.egress.given() {
		var p apiv1.EgressPolicy
		if err := f.egress.policy(&p); err != nil {
			return req, err
		}
		req.Egress = &p
	}
	return req, nil
}

func (a *app) sandboxCreateCommand() *cobra.Command {
	var f createFlags
	var noWait bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and wait until it runs",
		Long: "Create a sandbox. By default the command waits until the sandbox runs, showing\n" +
			"progress on stderr, and fails if the create operation fails; --no-wait returns\n" +
			"as soon as the server has accepted the request.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if req.Snapshot == "" {
				if err := a.waitForTemplate(ctx, c, req.Template); err != nil {
					return err
				}
			}
			res, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			if noWait {
				return a.printer().sandboxWithOperation(res)
			}
			res, waitErr := a.waitCreated(ctx, c, res, a.progressf)
			if err := a.printer().sandboxWithOperation(res); err != nil {
				return err
			}
			var failed *client.OperationFailedError
			if errors.As(waitErr, &failed) {
				return fmt.Errorf("%w; remove the sandbox with `airlock sandbox delete %s`", waitErr, res.Sandbox.ID)
			}
			return waitErr
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the request is accepted; do not wait for the sandbox to run")
	return cmd
}

// waitCreated waits for a create operation, reporting the sandbox's state
// changes through progress (nil: quiet), and returns the sandbox as it is
// then with the finished operation.
func (a *app) waitCreated(ctx context.Context, c *client.Client, res apiv1.SandboxWithOperation, progress func(string, ...any)) (apiv1.SandboxWithOperation, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	opID, err := model.ParseOperationID(res.Operation.ID)
	if err != nil {
		return res, fmt.Errorf("server returned a bad operation ID: %w", err)
	}
	sbID, err := model.ParseSandboxID(res.Sandbox.ID)
	if err != nil {
		return res, fmt.Errorf("server returned a bad sandbox ID: %w", err)
	}
	start := time.Now()
	progress("sandbox %s: %s (operation %s)", sbID, res.Sandbox.State, opID)
	lastState := res.Sandbox.State
	op, waitErr := c.WaitOperation(ctx, opID, client.WithPollWait(2*time.Second),
		client.WithProgress(func(apiv1.Operation) {
			sb, err := c.GetSandbox(ctx, sbID)
			if err == nil && sb.State != lastState {
				lastState = sb.State
				progress("sandbox %s: %s", sbID, sb.State)
			}
		}))
	if op.ID != "" {
		res.Operation = op
	}
	var failed *client.OperationFailedError
	if waitErr != nil && !errors.As(waitErr, &failed) {
		return res, waitErr
	}
	// The operation finished: show the sandbox as it is now.
	sb, err := c.GetSandbox(ctx, sbID)
	if err != nil {
		return res, errors.Join(waitErr, err)
	}
	res.Sandbox = sb
	if failed != nil {
		return res, waitErr
	}
	progress("sandbox %s: %s (%.1fs)", sbID, sb.State, time.Since(start).Seconds())
	return res, nil
}

func (a *app) sandboxListCommand() *cobra.Command {
	var (
		states, metadata []string
		limit            int
		all              bool
		cursor           string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sandboxes",
		Long: "List the project's sandboxes, one page at a time (--limit, --cursor) or all of\n" +
			"them (--all). --state and --metadata filter; states match any, metadata all.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := client.ListSandboxesQuery{Limit: limit, Cursor: cursor}
			var err error
			if q.States, err = parseStates(states); err != nil {
				return err
			}
			if q.Metadata, err = parseMetadataFilters(metadata); err != nil {
				return err
			}
			if limit < 0 {
				return usageErrorf("--limit must be positive")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var list apiv1.SandboxList
			if all {
				list, err = c.ListAllSandboxes(cmd.Context(), q)
			} else {
				list, err = c.ListSandboxes(cmd.Context(), q)
			}
			if err != nil {
				return err
			}
			if err := a.printer().sandboxList(list); err != nil {
				return err
			}
			if list.NextCursor != "" && a.flags.output == outputTable {
				a.progressf("more sandboxes: add --cursor %s, or --all", list.NextCursor)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&states, "state", nil, "only sandboxes in this state (repeatable or comma-separated)")
	fs.StringArrayVar(&metadata, "metadata", nil, "only sandboxes with this KEY=VALUE label (repeatable)")
	fs.IntVar(&limit, "limit", 0, "page size (default: the server's)")
	fs.StringVar(&cursor, "cursor", "", "start at this page (a previous list's next cursor)")
	fs.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

func (a *app) sandboxGetCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{Use: "get SANDBOX", Short: "Show a sandbox"},
		"SANDBOX", model.ParseSandboxID, (*client.Client).GetSandbox, printer.sandbox)
}

func (a *app) sandboxDeleteCommand() *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "delete SANDBOX",
		Short: "Delete a sandbox and wait until it is gone",
		Args:  exactArgs("SANDBOX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParseSandboxID, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			res, err := c.DeleteSandbox(ctx, id)
			if err != nil {
				return err
			}
			if noWait {
				return a.printer().operationResponse(res)
			}
			opID, err := model.ParseOperationID(res.Operation.ID)
			if err != nil {
				return fmt.Errorf("server returned a bad operation ID: %w", err)
			}
			a.progressf("sandbox %s: deleting (operation %s)", id, opID)
			op, waitErr := c.WaitOperation(ctx, opID)
			if op.ID != "" {
				res.Operation = op
				if err := a.printer().operationResponse(res); err != nil {
					return err
				}
			}
			return waitErr
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the request is accepted")
	return cmd
}
