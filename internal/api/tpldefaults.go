package api

import (
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procctl"
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
	if err := procctl.ApplyDefaults(spec, d); err != nil {
		var pe *procctl.Error
		if errors.As(err, &pe) {
			return statusErrorf(pe.Status, pe.Code, "%s", pe.Message)
		}
		return err
	}
	if _, err := parseArgs(spec.Args); err != nil {
		return fmt.Errorf("template %s's default command: %w", tpl, err)
	}
	return nil
}
