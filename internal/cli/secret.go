package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func (a *app) secretCommand() *cobra.Command {
	return group("secret", "Set, list and remove the project's secrets, which the egress proxy injects",
		a.secretSetCommand(), a.secretListCommand(), a.secretRmCommand())
}

// maxSecretInput bounds what is read as a secret's value.
const maxSecretInput = 64 << 10

func (a *app) secretSetCommand() *cobra.Command {
	var (
		hosts                   []string
		header, format, valFile string
	)
	cmd := &cobra.Command{
		Use:   "set NAME [--host HOST]... [--header NAME] [--format TEMPLATE] [--value-file PATH]",
		Short: "Create or replace a secret; the value comes from stdin or --value-file, never the command line",
		Long: "Create or replace a secret of the key's project. The egress proxy sets header\n" +
			"--header (default Authorization) to --format (default \"Bearer {value}\" for\n" +
			"Authorization, \"{value}\" otherwise) on requests of the project's sandboxes to\n" +
			"the --host names (exact or *.suffix) only. Sandboxes see only the placeholder\n" +
			"airlock-secret-NAME. Without --host the secret is sent only where a sandbox's\n" +
			"header rules name it (${secrets.NAME}, E2B's network.rules).\n" +
			"The value is read from --value-file or stdin (one trailing\n" +
			"newline is dropped); it is never taken from arguments, which other users of the\n" +
			"machine can see.",
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := a.readSecretValue(valFile)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.PutSecret(cmd.Context(), args[0], apiv1.PutSecretRequest{Value: value, Hosts: hosts, Header: header, Format: format})
			if err != nil {
				return err
			}
			return a.printer().secret(s)
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&hosts, "host", nil, "a host the secret may be sent to: NAME or *.SUFFIX (repeatable)")
	fs.StringVar(&header, "header", "", "the request header to set (default Authorization)")
	fs.StringVar(&format, "format", "", "the header value, {value} standing for the secret")
	fs.StringVar(&valFile, "value-file", "", "read the value from this file (default: stdin)")
	return cmd
}

func (a *app) readSecretValue(path string) (string, error) {
	var (
		r    io.Reader = a.env.Stdin
		what           = "stdin"
	)
	if path != "" && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--value-file: %w", err)
		}
		defer f.Close()
		r, what = f, path
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("read the secret from %s: %w", what, err)
	}
	if len(b) > maxSecretInput {
		return "", usageErrorf("the secret read from %s is longer than %d bytes", what, maxSecretInput)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", usageErrorf("no secret value on %s (pipe it in, or give --value-file)", what)
	}
	return string(b), nil
}

func (a *app) secretListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the project's secrets (never their values)",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().secretList(l)
		},
	}
}

func (a *app) secretRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a secret",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.DeleteSecret(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printer().secret(s)
		},
	}
}

func (p printer) secret(s apiv1.Secret) error {
	return p.print(s, func(w io.Writer) {
		fmt.Fprintf(w, "Name:\t%s\n", s.Name)
		fmt.Fprintf(w, "Hosts:\t%s\n", strings.Join(s.Hosts, ", "))
		fmt.Fprintf(w, "Header:\t%s: %s\n", s.Header, s.Format)
		fmt.Fprintf(w, "Placeholder:\t%s\n", s.Placeholder)
		fmt.Fprintf(w, "Updated:\t%s\n", timeText(s.UpdatedAt))
	})
}

func (p printer) secretList(l apiv1.SecretList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tHOSTS\tHEADER\tPLACEHOLDER\tUPDATED")
		for _, s := range l.Secrets {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Name, strings.Join(s.Hosts, ","), s.Header, s.Placeholder, timeText(s.UpdatedAt))
		}
	})
}
