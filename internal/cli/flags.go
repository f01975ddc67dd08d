package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// parseKV parses repeated KEY=VALUE flag values. The value may contain '=';
// the key may not be empty and may not repeat.
func parseKV(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, usageErrorf("--%s %q: expected KEY=VALUE", flag, kv)
		case k == "":
			return nil, usageErrorf("--%s %q: the key before '=' is empty", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, usageErrorf("--%s: key %q given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// parseEnvFlag parses --env values into validated environment variables.
func parseEnvFlag(vals []string) (map[string]string, error) {
	raw, err := parseKV("env", vals)
	if err != nil || raw == nil {
		return nil, err
	}
	env, err := model.ParseEnv(raw)
	if err != nil {
		return nil, usageErrorf("--env: %w", err)
	}
	return env, nil
}

// parseMetadataFlag parses --metadata values into validated metadata.
func parseMetadataFlag(vals []string) (map[string]string, error) {
	raw, err := parseKV("metadata", vals)
	if err != nil || raw == nil {
		return nil, err
	}
	md, err := model.ParseMetadata(raw)
	if err != nil {
		return nil, usageErrorf("--metadata: %w", err)
	}
	return md, nil
}

// parseLabelFlag parses repeated KEY=VALUE node labels of flag (--label of
// the server, --node-selector of a create): each key once.
func parseLabelFlag(flag string, vals []string) (model.NodeLabels, error) {
	labels := map[string]string{}
	for _, l := range vals {
		k, v, err := model.ParseNodeLabel(l)
		if err != nil {
			return nil, usageErrorf("%s: %w", flag, err)
		}
		if _, dup := labels[k]; dup {
			return nil, usageErrorf("%s %s given twice", flag, k)
		}
		labels[k] = v
	}
	out, err := model.ParseNodeLabels(labels)
	if err != nil {
		return nil, usageErrorf("%s: %w", flag, err)
	}
	return out, nil
}

// parseMetadataFilters parses --metadata filter terms of a list.
func parseMetadataFilters(vals []string) ([]client.MetadataFilter, error) {
	var out []client.MetadataFilter
	for _, v := range vals {
		k, val, err := model.ParseMetadataFilter(v)
		if err != nil {
			return nil, usageErrorf("--metadata: %w", err)
		}
		out = append(out, client.MetadataFilter{Key: k, Value: val})
	}
	return out, nil
}

// parseStates parses --state values; each may also be a comma-separated list.
func parseStates(vals []string) ([]model.SandboxState, error) {
	var out []model.SandboxState
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			st, err := model.ParseSandboxState(strings.TrimSpace(s))
			if err != nil {
				return nil, usageErrorf("--state: %w", err)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// parseArg parses a positional argument with one of the model's parsers,
// turning a failure into a usage error.
func parseArg[T any](parse func(string) (T, error), s string) (T, error) {
	v, err := parse(s)
	if err != nil {
		return v, usageError{err}
	}
	return v, nil
}

// exactArgs accepts exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return usageErrorf("missing %s", strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			return usageErrorf("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}

// commandArgs splits the positional arguments of exec (after the sandbox)
// or run into the command to run. A "--" that flag parsing left in place
// (flags stop at the first positional argument) is dropped.
func commandArgs(cmd *cobra.Command, args []string) ([]string, error) {
	args = optionalCommandArgs(cmd, args)
	if len(args) == 0 {
		return nil, usageErrorf("missing the command to run (after --)")
	}
	return args, nil
}

// optionalCommandArgs is commandArgs where no command is allowed: the
// sandbox's template then runs its default command (an image's entrypoint
// and cmd).
func optionalCommandArgs(cmd *cobra.Command, args []string) []string {
	if cmd.Flags().ArgsLenAtDash() < 0 && len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	return args
}
