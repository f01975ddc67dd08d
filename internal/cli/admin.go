package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

func (a *app) adminCommand() *cobra.Command {
	return group("admin", "Manage projects, API keys and nodes, and read the audit log (admin keys only)",
		group("project", "Create and list projects, and set their quotas", a.projectCreateCommand(), a.projectListCommand(), a.projectQuotaCommand()),
		group("key", "Create, list and revoke API keys", a.keyCreateCommand(), a.keyListCommand(), a.keyRevokeCommand(), a.keyTokenCommand()),
		group("attach-key", "Manage the keys that sign attachment tokens", a.attachKeyRotateCommand()),
		a.nodeCommand(),
		a.auditCommand(),
	)
}

func (a *app) attachKeyRotateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate",
		Short: "Make a new attachment-token signing key active; tokens already issued keep working until they expire",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.RotateAttachKey(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().attachKeyList(l)
		},
	}
}

func (a *app) projectCreateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Create a project",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usageErrorf("NAME must not be empty")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.CreateProject(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printer().project(p)
		},
	}
}

func (a *app) projectListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List projects",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListProjects(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().projectList(l)
		},
	}
}

func (a *app) keyCreateCommand() *cobra.Command {
	var project, role, name, format string
	cmd := &cobra.Command{
		Use:   "create --project PROJECT --role admin|member [--name NAME] [--format airlock|e2b]",
		Short: "Create an API key; its token is shown only once",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if project == "" {
				return usageErrorf("--project is required")
			}
			pid, err := parseArg(model.ParseProjectID, project)
			if err != nil {
				return err
			}
			if role == "" {
				return usageErrorf("--role is required (admin or member)")
			}
			r, err := parseArg(model.ParseRole, role)
			if err != nil {
				return err
			}
			f, err := auth.ParseAPIKeyFormat(format)
			if err != nil {
				return usageErrorf("--format: %w", err)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKey(cmd.Context(), apiv1.CreateAPIKeyRequest{ProjectID: pid.String(), Role: string(r), Name: name, Format: string(f)})
			if err != nil {
				return err
			}
			if err := a.printer().apiKey(k); err != nil {
				return err
			}
			if k.Token != "" {
				a.progressf("Store the token now: it is not shown again.")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&project, "project", "", "project ID (prj_…) the key belongs to")
	fs.StringVar(&role, "role", "", "admin or member")
	fs.StringVar(&name, "name", "", "a name to recognise the key by")
	fs.StringVar(&format, "format", string(auth.FormatAirlock), "how the token is spelled: airlock (alk_…) or e2b (e2b_<hex>, for E2B SDKs' E2B_API_KEY); the same key either way")
	return cmd
}

// keyTokenCommand prints a fresh API key token without a server: the
// first admin key of a deployment whose servers import it
// (--admin-key-file, e.g. from a Kubernetes Secret).
func (a *app) keyTokenCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print a new API key token, offline (for airlock server --admin-key-file on a fresh database)",
		Args:  exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			token, _, _ := auth.GenerateAPIKey()
			_, err := fmt.Fprintln(a.env.Stdout, token)
			return err
		},
	}
}

func (a *app) keyListCommand() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "list [--project PROJECT]",
		Short: "List API keys",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var pid model.ProjectID
			if project != "" {
				var err error
				if pid, err = parseArg(model.ParseProjectID, project); err != nil {
					return err
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListAPIKeys(cmd.Context(), pid)
			if err != nil {
				return err
			}
			return a.printer().apiKeyList(l)
		},
	}
	cmd.Flags().StringVar(&project, "project", "", "only keys of this project ID")
	return cmd
}

func (a *app) keyRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke KEY",
		Short: "Revoke an API key",
		Args:  exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, c, err := parseArgClient(a, model.ParseAPIKeyID, args[0])
			if err != nil {
				return err
			}
			k, err := c.RevokeAPIKey(cmd.Context(), id)
			if err != nil {
				return err
			}
			if k.ID == "" {
				// The server answered without a body.
				if a.flags.output == outputJSON {
					return a.printer().print(map[string]string{"id": id.String()}, nil)
				}
				a.progressf("revoked %s", id)
				return nil
			}
			return a.printer().apiKey(k)
		},
	}
}
