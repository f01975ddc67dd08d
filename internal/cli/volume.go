package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) volumeCommand() *cobra.Command {
	return group("volume", "Create, list, inspect and delete the project's persistent volumes, and read and write their files",
		a.volumeCreateCommand(), a.volumeListCommand(), a.volumeGetCommand(), a.volumeDeleteCommand(),
		a.volumeLsCommand(), a.volumeCatCommand(), a.volumePutCommand(), a.volumeRmCommand(), a.volumeMkdirCommand())
}

func (a *app) volumeCreateCommand() *cobra.Command {
	var sizeMiB int64
	cmd := &cobra.Command{
		Use:   "create NAME --size-mib N",
		Short: "Create a volume: persistent storage that outlives sandboxes, mounted with `create --volume NAME:/path`",
		Long: "Create a volume of the key's project. Its size is a hard limit (writes beyond it\n" +
			"fail with ENOSPC in the sandbox); the server bounds the sizes of a project's\n" +
			"volumes together (--volume-quota-mib). A volume lives on the node of the first\n" +
			"sandbox that mounts it, and later sandboxes that mount it run there.",
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := model.ParseVolumeName(args[0]); err != nil {
				return usageErrorf("NAME: %w", err)
			}
			if _, err := model.ParseVolumeSize(sizeMiB); err != nil {
				return usageErrorf("--size-mib: %w", err)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), apiv1.CreateVolumeRequest{Name: args[0], SizeMiB: sizeMiB})
			if err != nil {
				return err
			}
			return a.printer().volume(v)
		},
	}
	cmd.Flags().Int64Var(&sizeMiB, "size-mib", 1024, "size in MiB, its hard limit")
	return cmd
}

func (a *app) volumeListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the project's volumes",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().volumeList(l)
		},
	}
}

func (a *app) volumeGetCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{
		Use:   "get VOLUME",
		Short: "Show a volume (by ID or name): its size, node and the sandboxes that mount it",
	}, "VOLUME", parseVolumeArg, (*client.Client).GetVolume, printer.volume)
}

// parseVolumeArg parses a VOLUME argument (an ID or a name).
func parseVolumeArg(s string) (model.VolumeRef, error) {
	ref, err := model.ParseVolumeRef(s)
	if err != nil {
		return ref, fmt.Errorf("VOLUME: %w", err)
	}
	return ref, nil
}

func (a *app) volumeDeleteCommand() *cobra.Command {
	return argCommand(a, &cobra.Command{
		Use:   "delete VOLUME",
		Short: "Delete a volume (by ID or name) and its data; refused while a sandbox that is not deleted mounts it",
	}, "VOLUME", parseVolumeArg, (*client.Client).DeleteVolume, printer.volume)
}

// parseVolumeFlags parses --volume VOLUME:/path values (VOLUME a name or
// an ID).
func parseVolumeFlags(vals []string) ([]apiv1.VolumeMountRequest, error) {
	var out []apiv1.VolumeMountRequest
	for _, v := range vals {
		ref, path, ok := strings.Cut(v, ":")
		if !ok {
			return nil, usageErrorf("--volume %q: want VOLUME:/path", v)
		}
		if _, err := model.ParseVolumeRef(ref); err != nil {
			return nil, usageErrorf("--volume %q: %w", v, err)
		}
		if _, err := model.ParseVolumePath(path); err != nil {
			return nil, usageErrorf("--volume %q: %w", v, err)
		}
		out = append(out, apiv1.VolumeMountRequest{Volume: ref, Path: path})
	}
	return out, nil
}

func (p printer) volume(v apiv1.Volume) error {
	return p.print(v, func(w io.Writer) {
		fmt.Fprintf(w, "ID:\t%s\n", v.ID)
		fmt.Fprintf(w, "Name:\t%s\n", v.Name)
		fmt.Fprintf(w, "Size:\t%d MiB\n", v.SizeMiB)
		if v.UsedBytes != nil {
			fmt.Fprintf(w, "Used:\t%.1f MiB\n", float64(*v.UsedBytes)/(1<<20))
		}
		node := v.NodeID
		if node == "" {
			node = "(none yet: the first sandbox that mounts it chooses)"
		}
		fmt.Fprintf(w, "Node:\t%s\n", node)
		if len(v.MountedBy) > 0 {
			fmt.Fprintf(w, "Mounted by:\t%s\n", strings.Join(v.MountedBy, ", "))
		}
		fmt.Fprintf(w, "Created:\t%s\n", timeText(v.CreatedAt))
	})
}

func (p printer) volumeList(l apiv1.VolumeList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tSIZE_MIB\tNODE\tCREATED")
		for _, v := range l.Volumes {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", v.ID, v.Name, v.SizeMiB, v.NodeID, timeText(v.CreatedAt))
		}
	})
}
