package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// cpEnd is one side of `airlock cp`: a local path ("-" for stdin/stdout) or
// a path in a sandbox.
type cpEnd struct {
	sandbox model.SandboxID // "" for local
	guest   model.GuestPath
	local   string
}

// parseCpEnd reads SANDBOX:/path as a guest path; anything else is local.
func parseCpEnd(s string) (cpEnd, error) {
	if before, after, ok := strings.Cut(s, ":"); ok {
		if id, err := model.ParseSandboxID(before); err == nil {
			p, err := model.ParseGuestPath(after)
			if err != nil {
				return cpEnd{}, usageErrorf("%s: %w", s, err)
			}
			return cpEnd{sandbox: id, guest: p}, nil
		}
	}
	if s == "" {
		return cpEnd{}, usageErrorf("empty path")
	}
	return cpEnd{local: s}, nil
}

func (a *app) cpCommand() *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between this machine and a sandbox",
		Long: "Copy a file or directory into or out of a sandbox. SANDBOX:/path names the\n" +
			"sandbox side, anything else a local path. Directories travel as tar streams. As\n" +
			"with cp -r, copying onto an existing directory puts the source inside it.\n" +
			"SRC \"-\" uploads stdin as one file; DST \"-\" writes a file's bytes, or a\n" +
			"directory's tar stream, to stdout.",
		Example: "  airlock cp ./src sbx_…:/work/src\n  airlock cp sbx_…:/work/out.log -\n  tar c . | airlock cp - sbx_…:/work/in.tar",
		Args:    exactArgs("SRC", "DST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := parseCpEnd(args[0])
			if err != nil {
				return err
			}
			dst, err := parseCpEnd(args[1])
			if err != nil {
				return err
			}
			fileMode := -1
			if mode != "" {
				var m uint32
				if _, err := fmt.Sscanf(mode, "%o", &m); err != nil || m > 0o7777 {
					return usageErrorf("--mode must be octal, e.g. 0755")
				}
				fileMode = int(m)
			}
			switch {
			case src.sandbox != "" && dst.sandbox != "":
				return usageErrorf("copy between two sandbox paths is not supported: one side must be local")
			case src.sandbox == "" && dst.sandbox == "":
				return usageErrorf("one side must be SANDBOX:/path")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if src.sandbox != "" {
				return a.copyOut(cmd.Context(), c, src, dst.local)
			}
			return a.copyIn(cmd.Context(), c, src.local, dst, fileMode)
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits of an uploaded file (octal; default: the local file's)")
	return cmd
}

// copyOut copies a sandbox file or directory to a local path or stdout.
func (a *app) copyOut(ctx context.Context, c *client.Client, src cpEnd, dst string) error {
	fi, err := c.StatFile(ctx, src.sandbox, src.guest)
	if err != nil {
		return err
	}
	switch fi.Type {
	case apiv1.FileTypeDirectory:
		body, err := c.TarOut(ctx, src.sandbox, src.guest)
		if err != nil {
			return err
		}
		defer body.Close()
		if dst == "-" {
			_, err = io.CopyBuffer(a.env.Stdout, body, make([]byte, 256<<10))
			return err
		}
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base(src.guest.String()))
		}
		return extractLocalTar(body, dst)
	case apiv1.FileTypeFile, apiv1.FileTypeSymlink:
		body, size, err := c.Download(ctx, src.sandbox, src.guest)
		if err != nil {
			return err
		}
		defer body.Close()
		if dst == "-" {
			n, err := io.CopyBuffer(a.env.Stdout, body, make([]byte, 256<<10))
			if err == nil && size >= 0 && n != size {
				err = fmt.Errorf("download of %s ended after %d of %d bytes", src.guest, n, size)
			}
			return err
		}
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base(src.guest.String()))
		}
		return writeLocalFile(dst, body, size)
	}
	return fmt.Errorf("%s is a %s: only files and directories are copied", src.guest, fi.Type)
}

// writeLocalFile writes body to dst through a temporary file beside it.
func writeLocalFile(dst string, body io.Reader, size int64) error {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".airlock-*")
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(f, body, make([]byte, 256<<10))
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("download ended after %d of %d bytes", n, size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// copyIn copies a local file, directory or stdin into a sandbox.
func (a *app) copyIn(ctx context.Context, c *client.Client, src string, dst cpEnd, mode int) error {
	if src == "-" {
		_, err := c.Upload(ctx, dst.sandbox, dst.guest, mode, a.env.Stdin)
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	target := dst.guest
	if existing, err := c.StatFile(ctx, dst.sandbox, dst.guest); err == nil && existing.Type == apiv1.FileTypeDirectory {
		joined, err := model.ParseGuestPath(path.Join(dst.guest.String(), filepath.Base(filepath.Clean(src))))
		if err != nil {
			return err
		}
		target = joined
	} else if err != nil && !client.IsNotFound(err) {
		return err
	}
	if st.IsDir() {
		return a.uploadDir(ctx, c, src, dst.sandbox, target)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file or directory", src)
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if mode < 0 {
		mode = int(st.Mode().Perm())
	}
	_, err = c.Upload(ctx, dst.sandbox, target, mode, f)
	return err
}

// uploadDir streams a local directory as tar into a sandbox directory. The
// tar is written by a goroutine into a pipe that the upload reads; this
// function waits for it.
func (a *app) uploadDir(ctx context.Context, c *client.Client, src string, sb model.SandboxID, target model.GuestPath) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := writeLocalTar(pw, src)
		pw.CloseWithError(err)
		done <- err
	}()
	_, upErr := c.TarIn(ctx, sb, target, pr)
	pr.CloseWithError(errors.New("upload ended")) // unblocks the writer if the upload failed
	tarErr := <-done
	if upErr != nil {
		return upErr
	}
	if tarErr != nil {
		return fmt.Errorf("read %s: %w", src, tarErr)
	}
	return nil
}
