package guestops

import (
	"fmt"
	"slices"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// Defaults are what a sandbox's template gives the commands that do not
// say otherwise (see template.Defaults).
type Defaults struct {
	// Cwd is the working directory of a command that names none; "" or
	// "/": the root.
	Cwd model.GuestPath
	// User runs a command that names no user; nil: root.
	User *model.UserIDs
	// UserErr, if set, says why the template's user could not be
	// resolved: a command that names no user then cannot start.
	UserErr error
	// Command is the template's default command (an image's Entrypoint
	// followed by its Cmd): what a command with no args runs. Empty: such
	// a command is refused.
	Command []string
}

// ApplyDefaults fills in what spec leaves to the template: its default
// command (when spec has no args), its working directory and its user. A
// command's own args, cwd and user always win (args replace the whole
// default command, entrypoint included, as an exec does). It is
// done host-side when the command session is created, so the stored spec
// says what runs and any guest agent can run it. The error (a *Error) says
// that the template's user cannot be resolved and the command named none.
func ApplyDefaults(spec *model.ProcessSpec, d Defaults) error {
	if len(spec.Args) == 0 {
		if len(d.Command) == 0 {
			return newError(apiv1.CodeInvalidRequest,
				"args must name the program to run: the sandbox's template has no default command (entrypoint or cmd)")
		}
		spec.Args = slices.Clone(d.Command)
	}
	if spec.Cwd == "" && d.Cwd != "/" {
		spec.Cwd = d.Cwd
	}
	if spec.User != nil {
		return nil
	}
	if d.UserErr != nil {
		return newError(apiv1.CodeExecFailed,
			fmt.Sprintf("the command names no user and %v; give the command a user", d.UserErr))
	}
	if d.User != nil {
		u := *d.User
		spec.User = &u
	}
	return nil
}
