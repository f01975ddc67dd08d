package guestops

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// A command's own cwd and user win over the template's; the template's
// fill in what the command leaves out; a template without them changes
// nothing (root, "/").
func TestApplyDefaults(t *testing.T) {
	tplUser := &model.UserIDs{UID: 1234, GID: 50}
	own := &model.UserIDs{UID: 7, GID: 8}
	for _, c := range []struct {
		name     string
		spec     model.ProcessSpec
		def      Defaults
		wantCwd  model.GuestPath
		wantUser *model.UserIDs
		wantErr  bool
		noArgs   bool     // the command has no args (else it runs "true")
		wantArgs []string // when noArgs
		wantCode string   // when noArgs and wantErr
	}{
		{name: "no defaults", wantCwd: "", wantUser: nil},
		{name: "root cwd kept empty", def: Defaults{Cwd: "/"}, wantCwd: ""},
		{name: "template fills", def: Defaults{Cwd: "/work", User: tplUser}, wantCwd: "/work", wantUser: tplUser},
		{name: "command wins", spec: model.ProcessSpec{Cwd: "/tmp", User: own}, def: Defaults{Cwd: "/work", User: tplUser},
			wantCwd: "/tmp", wantUser: own},
		{name: "explicit root cwd wins", spec: model.ProcessSpec{Cwd: "/"}, def: Defaults{Cwd: "/work"}, wantCwd: "/"},
		{name: "unresolvable user", def: Defaults{Cwd: "/work", UserErr: errors.New(`the template's user "ghost": no such user`)}, wantErr: true},
		{name: "unresolvable user, command names one", spec: model.ProcessSpec{User: own},
			def: Defaults{Cwd: "/work", UserErr: errors.New("no such user")}, wantCwd: "/work", wantUser: own},
		{name: "default command", noArgs: true, def: Defaults{Command: []string{"/entry", "cmd"}}, wantArgs: []string{"/entry", "cmd"}},
		{name: "no default command", noArgs: true, wantErr: true, wantCode: apiv1.CodeInvalidRequest},
	} {
		spec := c.spec
		if !c.noArgs {
			spec.Args = []string{"true"}
		}
		err := ApplyDefaults(&spec, c.def)
		if c.noArgs {
			var pe *Error
			switch {
			case c.wantErr && (!errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Code != c.wantCode):
				t.Errorf("%s: err = %v, want a 400 %s", c.name, err, c.wantCode)
			case !c.wantErr && (err != nil || !slices.Equal(spec.Args, c.wantArgs)):
				t.Errorf("%s: args %q, %v; want %q", c.name, spec.Args, err, c.wantArgs)
			case !c.wantErr && &spec.Args[0] == &c.def.Command[0]:
				t.Errorf("%s: the spec shares the template's command", c.name)
			}
			continue
		}
		if c.wantErr {
			var pe *Error
			if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Code != apiv1.CodeExecFailed || !strings.Contains(pe.Message, `"ghost"`) {
				t.Errorf("%s: err = %v, want a 400 exec_failed naming the user", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if spec.Cwd != c.wantCwd || (spec.User == nil) != (c.wantUser == nil) || spec.User != nil && *spec.User != *c.wantUser {
			t.Errorf("%s: cwd %q user %v; want %q %v", c.name, spec.Cwd, spec.User, c.wantCwd, c.wantUser)
		}
		if spec.User != nil && spec.User == c.def.User {
			t.Errorf("%s: the spec shares the template's user", c.name)
		}
	}
}
