package api

import (
	"fmt"

	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// applyTemplateDefaults gives a new command the default command (when it
// has no args), working directory and user of its sandbox's template unless
// it names its own.
func (a *API) applyTemplateDefaults(spec *model.ProcessSpec, tpl model.TemplateDigest) error {
	if a.cfg.TemplateDefaults == nil {
		if len(spec.Args) == 0 {
			return badRequest("args must name the program to run: at least one argument")
		}
		return nil
	}
	if len(spec.Args) > 0 && spec.Cwd != "" && spec.User != nil {
		return nil // nothing left to the template
	}
	d, err := a.cfg.TemplateDefaults(tpl)
	if err != nil {
		return fmt.Errorf("defaults of template %s: %w", tpl, err)
	}
	if err := guestops.ApplyDefaults(spec, d); err != nil {
		return err
	}
	if _, err := parseArgs(spec.Args); err != nil {
		return fmt.Errorf("template %s's default command: %w", tpl, err)
	}
	return nil
}
