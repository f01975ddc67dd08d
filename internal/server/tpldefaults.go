package server

import (
	"fmt"
	"slices"

	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// commandDefaults gives the default command (Entrypoint then Cmd), working
// directory and user that template d's Config sets for the commands of its
// sandboxes. Its Env reaches them through the sandbox's environment
// (worker.Config.TemplateEnv).
func commandDefaults(templates *template.Store, d model.TemplateDigest) (guestops.Defaults, error) {
	def, err := templates.Defaults(d)
	if err != nil {
		return guestops.Defaults{}, err
	}
	out := guestops.Defaults{User: def.User, UserErr: def.UserErr,
		Command: append(slices.Clone(def.Config.Entrypoint), def.Config.Cmd...)}
	if wd := def.Config.WorkingDir; wd != "" {
		if out.Cwd, err = model.ParseGuestPath(wd); err != nil {
			return guestops.Defaults{}, fmt.Errorf("template %s: working directory: %w", d, err)
		}
	}
	return out, nil
}
