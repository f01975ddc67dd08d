package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) fsCommand() *cobra.Command {
	return group("fs", "Inspect and change files in a sandbox",
		a.fsListCommand(), a.fsStatCommand(), a.fsMkdirCommand(), a.fsMoveCommand(), a.fsRemoveCommand())
}

// fsArgs parses SANDBOX and the guest paths that follow it.
// fsRun makes the RunE of an fs subcommand: it parses SANDBOX PATH… and
// connects before calling fn.
func (a *app) fsRun(fn func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		id, paths, err := fsArgs(args)
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		return fn(cmd.Context(), c, id, paths)
	}
}

func fsArgs(args []string) (model.SandboxID, []model.GuestPath, error) {
	id, err := parseArg(model.ParseSandboxID, args[0])
	if err != nil {
		return "", nil, err
	}
	paths := make([]model.GuestPath, 0, len(args)-1)
	for _, s := range args[1:] {
		p, err := model.ParseGuestPath(s)
		if err != nil {
			return "", nil, usageErrorf("%w", err)
		}
		paths = append(paths, p)
	}
	return id, paths, nil
}

func (a *app) fsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX PATH",
		Aliases: []string{"list"},
		Short:   "List a directory in a sandbox",
		Args:    exactArgs("SANDBOX", "PATH"),
		RunE: a.fsRun(func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error {
			l, err := c.ListFiles(ctx, id, paths[0])
			if err != nil {
				return err
			}
			if err := a.printer().fileList(l); err != nil {
				return err
			}
			if l.Truncated && a.flags.output == outputTable {
				a.progressf("only the first %d entries are listed", len(l.Entries))
			}
			return nil
		}),
	}
}

func (a *app) fsStatCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "stat SANDBOX PATH",
		Short: "Describe a file in a sandbox (a final symlink is not followed)",
		Args:  exactArgs("SANDBOX", "PATH"),
		RunE: a.fsRun(func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error {
			fi, err := c.StatFile(ctx, id, paths[0])
			if err != nil {
				return err
			}
			return a.printer().fileInfo(fi)
		}),
	}
}

func (a *app) fsMkdirCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mkdir SANDBOX PATH",
		Short: "Create a directory and its missing parents in a sandbox",
		Args:  exactArgs("SANDBOX", "PATH"),
		RunE: a.fsRun(func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error {
			fi, err := c.Mkdir(ctx, id, paths[0])
			if err != nil {
				return err
			}
			return a.printer().fileInfo(fi)
		}),
	}
}

func (a *app) fsMoveCommand() *cobra.Command {
	var overwrite bool
	cmd := &cobra.Command{
		Use:     "mv SANDBOX FROM TO",
		Aliases: []string{"move"},
		Short:   "Move or rename a file or directory in a sandbox",
		Args:    exactArgs("SANDBOX", "FROM", "TO"),
		RunE: a.fsRun(func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error {
			fi, err := c.MoveFile(ctx, id, apiv1.MoveRequest{From: paths[0].String(), To: paths[1].String(), Overwrite: overwrite})
			if err != nil {
				return err
			}
			return a.printer().fileInfo(fi)
		}),
	}
	cmd.Flags().BoolVarP(&overwrite, "force", "f", false, "replace an existing destination")
	return cmd
}

func (a *app) fsRemoveCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm SANDBOX PATH",
		Short: "Remove a file, symlink or (with -r) directory in a sandbox",
		Args:  exactArgs("SANDBOX", "PATH"),
		RunE: a.fsRun(func(ctx context.Context, c *client.Client, id model.SandboxID, paths []model.GuestPath) error {
			if err := c.RemoveFile(ctx, id, paths[0], recursive); err != nil {
				return err
			}
			if a.flags.output == outputJSON {
				return a.printer().print(apiv1.RemoveResponse{Path: paths[0].String()}, nil)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	return cmd
}

func (p printer) fileInfo(fi apiv1.FileInfo) error {
	return p.print(fi, func(w io.Writer) {
		fmt.Fprintf(w, "Path:\t%s\n", fi.Path)
		fmt.Fprintf(w, "Type:\t%s\n", fi.Type)
		fmt.Fprintf(w, "Size:\t%d\n", fi.Size)
		fmt.Fprintf(w, "Mode:\t%04o\n", fi.Mode)
		fmt.Fprintf(w, "Modified:\t%s\n", timeText(fi.ModTime))
		if fi.LinkTarget != "" {
			fmt.Fprintf(w, "Target:\t%s\n", oneLine(fi.LinkTarget))
		}
	})
}

func (p printer) fileList(l apiv1.FileList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "TYPE\tMODE\tSIZE\tMODIFIED\tNAME")
		for _, fi := range l.Entries {
			name := oneLine(fi.Name)
			if fi.LinkTarget != "" {
				name += " -> " + oneLine(fi.LinkTarget)
			}
			fmt.Fprintf(w, "%s\t%04o\t%d\t%s\t%s\n", fi.Type, fi.Mode, fi.Size, timeText(fi.ModTime), name)
		}
	})
}
