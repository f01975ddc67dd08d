package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment"
)

func (a *app) envCommand() *cobra.Command {
	return group("env", "List the execution environments sandboxes can run in", a.envListCommand(), a.bootInputsCommand())
}

func (a *app) envListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List execution environments",
		Long: "List the execution environments the deployment knows, with this server's view of\n" +
			"each: whether its operator enabled it (airlock server --env NAME), whether it works\n" +
			"on this node, its isolation and what a suspend keeps. Sandboxes choose one with\n" +
			"`airlock sandbox create --environment NAME` (or --env NAME).",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListEnvironments(cmd.Context())
			if err != nil {
				return err
			}
			return a.printer().environmentList(l)
		},
	}
}

func (p printer) environmentList(l apiv1.EnvironmentList) error {
	return p.print(l, func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tREF\tISOLATION\tSNAPSHOT\tENABLED\tAVAILABLE\tDEFAULT\tVERSION\tREASON")
		for _, e := range l.Environments {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, shortRef(e.Ref), e.Isolation, e.Snapshot,
				yesNo(e.Enabled), yesNo(e.Available), yesNo(e.Default), orDash(oneLine(firstLine(e.Runtime.Version))), orDash(oneLine(e.Reason)))
		}
	})
}

// shortRef cuts an environment reference to its first 12 hex digits.
func shortRef(ref string) string {
	const prefix = "env:sha256:"
	if len(ref) >= len(prefix)+12 {
		return ref[:len(prefix)+12]
	}
	return ref
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// splitEnvFlag separates --env values: KEY=VALUE ones are environment
// variables; one without '=' names the execution environment (at most
// one). environmentFlag is --environment's value; both may name it only if
// they agree.
func splitEnvFlag(vals []string, environmentFlag string) (vars []string, selector string, err error) {
	selector = environmentFlag
	named := false
	for _, v := range vals {
		if strings.Contains(v, "=") {
			vars = append(vars, v)
			continue
		}
		if named {
			return nil, "", usageErrorf("--env %q: only one --env may name the execution environment (values without '=')", v)
		}
		named = true
		if selector != "" && selector != v {
			return nil, "", usageErrorf("--env %q and --environment %q name different execution environments", v, selector)
		}
		selector = v
	}
	if selector != "" {
		if _, err := environment.ParseSelector(selector); err != nil {
			return nil, "", usageErrorf("execution environment %q: %w", selector, err)
		}
	}
	return vars, selector, nil
}
