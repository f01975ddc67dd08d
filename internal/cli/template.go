package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) templateCommand() *cobra.Command {
	return group("template", "Import and list templates",
		a.templateImportCommand(), a.templateListCommand())
}

func (a *app) templateImportCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import SOURCE",
		Short: "Import a root filesystem on the server host as a template",
		Long: "Import a template from SOURCE, a directory or a tar archive (.tar, .tar.gz, .tgz)\n" +
			"on the server's host; a relative SOURCE is made absolute against the current\n" +
			"directory. --name points a name at the new template. Needs an admin key.",
		Args: exactArgs("SOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := args[0]
			if src == "" {
				return usageErrorf("SOURCE must not be empty")
			}
			if !filepath.IsAbs(src) {
				abs, err := filepath.Abs(src)
				if err != nil {
					return fmt.Errorf("making %s absolute: %w", src, err)
				}
				src = abs
			}
			req := apiv1.ImportTemplateRequest{Source: src}
			if name != "" {
				n, err := model.ParseTemplateName(name)
				if err != nil {
					return usageErrorf("--name: %w", err)
				}
				req.Name = n.String()
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.ImportTemplate(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.printer().template(t)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name to give the template, e.g. python-3.12")
	return cmd
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
