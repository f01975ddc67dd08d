package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// `airlock template inspect|tag|rm|gc`.

func (a *app) templateInspectCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect REF",
		Short: "Show a template: tags, size, configuration and the sandboxes using it",
		Long: "Show a template named by digest (sha256:…), name (tag latest) or name:tag: its tags,\n" +
			"size, creation time, runtime configuration (env, working directory, user) and how many\n" +
			"live sandboxes use it.",
		Example: "  airlock template inspect default\n  airlock template inspect python:3.12 -o json",
		Args:    exactArgs("REF"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, c, err := parseArgClient(a, model.ParseTemplateRef, args[0])
			if err != nil {
				return err
			}
			t, err := c.GetTemplate(cmd.Context(), ref.String())
			if err != nil {
				return err
			}
			return a.printer().template(t)
		},
	}
}

func (a *app) templateTagCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "tag REF NAME[:TAG]",
		Short: "Point a tag at a template, creating or moving it",
		Long: "Point NAME[:TAG] (tag latest if none) at the template that REF (a digest, name or\n" +
			"name:tag) names now. A tag that exists moves; the template it pointed at keeps its\n" +
			"other tags and is collected once nothing uses it. Needs an admin key.",
		Example: "  airlock template tag python:3.12 python\n  airlock template tag sha256:… python:3.12",
		Args:    exactArgs("REF", "NAME[:TAG]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := parseArg(model.ParseTemplateRef, args[0])
			if err != nil {
				return err
			}
			name, c, err := parseArgClient(a, model.ParseTaggedName, args[1])
			if err != nil {
				return err
			}
			t, err := c.TagTemplate(cmd.Context(), ref.String(), name.String())
			if err != nil {
				return err
			}
			return a.printer().template(t)
		},
	}
}

func (a *app) templateRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF",
		Aliases: []string{"delete"},
		Short:   "Remove a tag, or a template with all its tags",
		Long: "Remove a tag (REF is name or name:tag) or a template with all its tags and its tree on\n" +
			"the server's disk (REF is a digest). Both are refused while live sandboxes use the\n" +
			"template; the error names them. A template left without tags is deleted by the next\n" +
			"garbage collection (see `airlock template gc`). Needs an admin key.",
		Example: "  airlock template rm python:3.11\n  airlock template rm sha256:…",
		Args:    exactArgs("REF"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, c, err := parseArgClient(a, model.ParseTemplateRef, args[0])
			if err != nil {
				return err
			}
			d, err := c.DeleteTemplate(cmd.Context(), ref.String())
			if err != nil {
				return err
			}
			return a.printer().print(d, func(w io.Writer) {
				if d.Deleted {
					fmt.Fprintf(w, "Deleted template:\t%s\n", d.Digest)
					fmt.Fprintf(w, "Removed tags:\t%s\n", orDash(strings.Join(d.RemovedTags, ", ")))
					return
				}
				fmt.Fprintf(w, "Removed tag:\t%s\n", strings.Join(d.RemovedTags, ", "))
				fmt.Fprintf(w, "Template:\t%s\n", d.Digest)
			})
		},
	}
}

func (a *app) templateGCCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Delete templates that no tag and no live sandbox uses, now",
		Long: "Run the server's template garbage collection now: delete every template that no tag\n" +
			"and no live sandbox uses, and remove deleted templates' trees from the server's disk.\n" +
			"The server also runs it every --template-gc-interval. Needs an admin key.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.CollectTemplates(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().print(r, func(w io.Writer) {
				fmt.Fprintf(w, "Collected:\t%s\n", orDash(strings.Join(r.Collected, ", ")))
				fmt.Fprintf(w, "Trees removed:\t%s\n", orDash(strings.Join(r.TreesRemoved, ", ")))
				if r.Busy {
					fmt.Fprintf(w, "Note:\tan import was running; some trees stay until the next run\n")
				}
			})
		},
	}
}

// templateFields writes a template's readable view.
func templateFields(w io.Writer, t apiv1.Template) {
	fmt.Fprintf(w, "Digest:\t%s\n", t.Digest)
	fmt.Fprintf(w, "Tags:\t%s\n", orDash(strings.Join(t.Names, ", ")))
	fmt.Fprintf(w, "Size:\t%s\n", byteSize(t.SizeBytes))
	fmt.Fprintf(w, "Created:\t%s\n", timeText(t.CreatedAt))
	if t.InUse != nil {
		fmt.Fprintf(w, "In use:\t%d live sandbox(es)\n", *t.InUse)
	}
	if c := t.Config; c != nil {
		fmt.Fprintf(w, "Env:\t%s\n", orDash(strings.Join(c.Env, " ")))
		fmt.Fprintf(w, "Workdir:\t%s\n", orDash(c.WorkingDir))
		fmt.Fprintf(w, "User:\t%s\n", orDash(c.User))
		if len(c.Entrypoint) > 0 {
			fmt.Fprintf(w, "Entrypoint:\t%s\n", quoteArgs(c.Entrypoint))
		}
		if len(c.Cmd) > 0 {
			fmt.Fprintf(w, "Cmd:\t%s\n", quoteArgs(c.Cmd))
		}
		if c.StartCmd != "" {
			fmt.Fprintf(w, "Start:\t%s\n", c.StartCmd)
		}
		if c.ReadyCmd != "" {
			fmt.Fprintf(w, "Ready:\t%s (within %s)\n", c.ReadyCmd, time.Duration(c.ReadyTimeoutMS)*time.Millisecond)
		}
	}
}

// templateRow writes a template's line of `template list`.
func templateRow(w io.Writer, t apiv1.Template) {
	inUse := "-"
	if t.InUse != nil {
		inUse = strconv.Itoa(*t.InUse)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", orDash(strings.Join(t.Names, ",")), shortDigest(t.Digest),
		byteSize(t.SizeBytes), timeText(t.CreatedAt), inUse)
}

const templateListHeader = "TAGS\tDIGEST\tSIZE\tCREATED\tIN USE"

func quoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strconv.Quote(a)
	}
	return strings.Join(out, " ")
}
