package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/template"
)

func (a *app) templateCommand() *cobra.Command {
	return group("template", "Build, import, list, inspect, tag and remove templates",
		a.templateImportCommand(), a.templateBuildCommand(), a.templateListCommand(),
		a.templateInspectCommand(), a.templateTagCommand(), a.templateRmCommand(), a.templateGCCommand())
}

func (a *app) templateImportCommand() *cobra.Command {
	var (
		name   string
		detach bool
	)
	cmd := &cobra.Command{
		Use:   "import PATH|IMAGE",
		Short: "Import a root filesystem or an OCI image as a template",
		Long: "Import a template from a root filesystem on the server's host or from an OCI image.\n" +
			"--name points a name at the new template. Needs an admin key. The server imports in\n" +
			"the background; the command follows the import until it is done (a progress line on\n" +
			"a terminal) and exits non-zero with its error if it fails; --detach prints the build\n" +
			"ID and returns (follow it with `airlock build log ID`).\n\n" +
			"The source is one of:\n" +
			"  PATH                        a directory or a tar archive (.tar, .tar.gz, .tgz) on the\n" +
			"                              server's host; a relative PATH is made absolute against the\n" +
			"                              current directory\n" +
			"  REGISTRY/REPO:TAG           an image in a registry, pulled anonymously by the server\n" +
			"  REGISTRY/REPO@sha256:…      (the first component names the registry host: it holds a\n" +
			"                              '.' or ':', or is localhost; plain HTTP only on loopback)\n" +
			"  docker://REF                any registry reference; Docker Hub is the default registry\n" +
			"                              (docker://alpine:3.20)\n" +
			"  oci-layout:/DIR             an OCI image layout directory on the server's host\n" +
			"  docker-archive:/FILE.tar    a `docker save` tarball on the server's host\n\n" +
			"A multi-platform image gives its linux image for the server's architecture. The same\n" +
			"image gives the same template digest from every source.",
		Example: "  airlock template import ./rootfs --name mybase\n" +
			"  airlock template import ghcr.io/example/python:3.12 --name python-3.12\n" +
			"  airlock template import docker://alpine:3.20 --name alpine\n" +
			"  airlock template import oci-layout:/srv/images/python --name python",
		Args: exactArgs("PATH|IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := importSource(args[0])
			if err != nil {
				return err
			}
			req := apiv1.ImportTemplateRequest{Source: src}
			if req.Name, err = nameFlag(name); err != nil {
				return err
			}
			return a.startBuild(cmd.Context(), req, detach)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name[:tag] to give the template, e.g. python:3.12 (tag latest if none)")
	cmd.Flags().BoolVar(&detach, "detach", false, "print the build ID and return without following the import")
	return cmd
}

// importSource is the source the server is asked to import for the
// argument of `template import`: an image reference as given ("docker://…",
// "oci-layout:…", "docker-archive:…", or "registry/…" whose first component
// names a registry host and that is not a local path), otherwise a path,
// made absolute against the current directory.
func importSource(arg string) (string, error) {
	if arg == "" {
		return "", usageErrorf("PATH|IMAGE must not be empty")
	}
	if template.IsImageRefForm(arg) || filepath.IsAbs(arg) {
		return arg, nil
	}
	if template.HasRegistryHost(arg) {
		if _, err := os.Lstat(arg); errors.Is(err, fs.ErrNotExist) {
			return arg, nil
		}
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", fmt.Errorf("making %s absolute: %w", arg, err)
	}
	return abs, nil
}

func (a *app) templateListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List templates",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().templateList(l)
		},
	}
}
