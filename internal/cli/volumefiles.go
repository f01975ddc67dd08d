package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// The volume content commands: a volume's files without a sandbox,
// named VOLUME[:PATH] (VOLUME its ID or name, PATH inside it, "/" when
// absent).

// volumeFileArg parses VOLUME[:PATH]; needPath refuses a missing PATH.
func volumeFileArg(s string, needPath bool) (model.VolumeRef, model.VolumeFilePath, error) {
	ref, path, ok := strings.Cut(s, ":")
	v, err := model.ParseVolumeRef(ref)
	if err != nil {
		return v, "", usageErrorf("%q: %w", s, err)
	}
	if !ok || path == "" {
		if needPath {
			return v, "", usageErrorf("%q: want VOLUME:PATH", s)
		}
		path = "/"
	}
	p, err := model.ParseVolumeFilePath(path)
	if err != nil {
		return v, "", usageErrorf("%q: %w", s, err)
	}
	return v, p, nil
}

// volumeFileRun makes the RunE of a command on VOLUME[:PATH] (its first
// argument).
func (a *app) volumeFileRun(needPath bool, fn func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		v, p, err := volumeFileArg(args[0], needPath)
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		return fn(cmd.Context(), c, v, p, args[1:])
	}
}

func (a *app) volumeLsCommand() *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:   "ls VOLUME[:PATH]",
		Short: "List a directory of a volume (its root without PATH), without a sandbox",
		Args:  exactArgs("VOLUME[:PATH]"),
		RunE: a.volumeFileRun(false, func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, _ []string) error {
			l, err := c.ListVolumeFiles(ctx, v, p, depth)
			if err != nil {
				return err
			}
			if err := a.printer().volumeFileList(l); err != nil {
				return err
			}
			if l.Truncated && a.flags.output == outputTable {
				a.progressf("only the first %d entries are listed", len(l.Entries))
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "levels to list (1–16)")
	return cmd
}

func (a *app) volumeCatCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cat VOLUME:PATH",
		Short: "Write a file of a volume to standard output, without a sandbox",
		Args:  exactArgs("VOLUME:PATH"),
		RunE: a.volumeFileRun(true, func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, _ []string) error {
			body, size, err := c.ReadVolumeFile(ctx, v, p)
			if err != nil {
				return err
			}
			defer body.Close()
			n, err := io.Copy(a.env.Stdout, body)
			if err == nil && size >= 0 && n != size {
				err = fmt.Errorf("%s:%s: got %d of %d bytes", v, p, n, size)
			}
			return err
		}),
	}
}

func (a *app) volumePutCommand() *cobra.Command {
	var (
		mode        string
		uid, gid    int
		noOverwrite bool
	)
	cmd := &cobra.Command{
		Use:   "put VOLUME:PATH [LOCAL_FILE|-]",
		Short: "Write a file of a volume from a local file or standard input, without a sandbox",
		Long: "Write a file of a volume from LOCAL_FILE (standard input without one, or with -).\n" +
			"The file is replaced atomically once whole; missing parent directories are\n" +
			"made; the volume's size bounds it (volume_full when the volume fills).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return nil
			}
			return exactArgs("VOLUME:PATH", "LOCAL_FILE")(cmd, args)
		},
		RunE: a.volumeFileRun(true, func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, rest []string) error {
			q := url.Values{}
			if mode != "" {
				if _, err := strconv.ParseUint(mode, 8, 12); err != nil {
					return usageErrorf("--mode %q: want octal permission bits (e.g. 644)", mode)
				}
				q.Set("mode", mode)
			}
			for name, id := range map[string]int{"uid": uid, "gid": gid} {
				if id >= 0 {
					q.Set(name, strconv.Itoa(id))
				}
			}
			if noOverwrite {
				q.Set("overwrite", "false")
			}
			in := a.env.Stdin
			if len(rest) == 1 && rest[0] != "-" {
				f, err := os.Open(rest[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			fi, err := c.WriteVolumeFile(ctx, v, p, in, q)
			if err != nil {
				return err
			}
			return a.printer().volumeFile(fi)
		}),
	}
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits in octal (default 644)")
	cmd.Flags().IntVar(&uid, "uid", -1, "owner, a guest uid (default 0)")
	cmd.Flags().IntVar(&gid, "gid", -1, "group, a guest gid (default 0)")
	cmd.Flags().BoolVar(&noOverwrite, "no-overwrite", false, "refuse to replace an existing file")
	return cmd
}

func (a *app) volumeRmCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm VOLUME:PATH",
		Short: "Remove a file or directory of a volume, without a sandbox",
		Args:  exactArgs("VOLUME:PATH"),
		RunE: a.volumeFileRun(true, func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, _ []string) error {
			return c.RemoveVolumeFile(ctx, v, apiv1.VolumeRemoveRequest{Path: p.String(), Recursive: recursive})
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	return cmd
}

func (a *app) volumeMkdirCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mkdir VOLUME:PATH",
		Short: "Make a directory of a volume and its missing parents, without a sandbox",
		Args:  exactArgs("VOLUME:PATH"),
		RunE: a.volumeFileRun(true, func(ctx context.Context, c *client.Client, v model.VolumeRef, p model.VolumeFilePath, _ []string) error {
			fi, err := c.MkdirVolumeFile(ctx, v, apiv1.VolumeMkdirRequest{Path: p.String()})
			if err != nil {
				return err
			}
			return a.printer().volumeFile(fi)
		}),
	}
}

func (p printer) volumeFileList(l apiv1.VolumeFileList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "TYPE\tMODE\tOWNER\tSIZE\tMODIFIED\tPATH")
		for _, fi := range l.Entries {
			name := oneLine(fi.Path)
			if fi.LinkTarget != "" {
				name += " -> " + oneLine(fi.LinkTarget)
			}
			fmt.Fprintf(w, "%s\t%04o\t%d:%d\t%d\t%s\t%s\n", fi.Type, fi.Mode, fi.UID, fi.GID, fi.Size, timeText(fi.MTime), name)
		}
	})
}

func (p printer) volumeFile(fi apiv1.VolumeFile) error {
	return p.volumeFileList(apiv1.VolumeFileList{Path: fi.Path, Entries: []apiv1.VolumeFile{fi}})
}
