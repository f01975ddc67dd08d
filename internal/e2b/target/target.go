// Package target carries the sandbox an E2B in-sandbox request is for, as
// the E2B gateway resolved it, to the services that answer it (envd's
// process and filesystem services, /files, the code interpreter).
//
// The gateway authenticates the request (X-Access-Token, or a signed file
// URL), finds the sandbox, wakes it if it is suspended, and puts a Target
// in the request's context. The services then act on the sandbox only
// through Native: Airlock's own API, in-process, acting as that one
// sandbox's access token (the caller the gateway authenticated), so every
// E2B call goes through the same checks, quotas, activity tracking and
// node routing as a native one.
package target

import (
	"context"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/model"
)

// Target is the sandbox of one E2B in-sandbox request.
type Target struct {
	// Sandbox is the sandbox the request addresses.
	Sandbox model.SandboxID
	// Native calls Airlock's API as a caller that can act on Sandbox
	// alone.
	Native *client.Client
	// User is the Unix user the caller chose (Basic auth user name of an
	// RPC, ?username= of /files); empty means the sandbox's default user.
	User string
	// Users resolves User (see guestuser.Cache.Lookup); shared by all
	// requests.
	Users *guestuser.Cache
}

type key struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// From returns the Target ctx carries, if any.
func From(ctx context.Context) (Target, bool) {
	t, ok := ctx.Value(key{}).(Target)
	return t, ok
}

// LookupUser resolves t.User in the sandbox (through t.Users when set):
// guestuser.ErrUnknown when the sandbox has no such account.
func (t Target) LookupUser(ctx context.Context) (guestuser.User, error) {
	acc, err := t.Accounts(ctx)
	if err != nil {
		return guestuser.User{}, err
	}
	return acc.Pick(t.User)
}

// Accounts reads the sandbox's accounts (through t.Users when set).
func (t Target) Accounts(ctx context.Context) (guestuser.Accounts, error) {
	if t.Users != nil {
		return t.Users.Accounts(ctx, t.Native, t.Sandbox)
	}
	return guestuser.ReadAccounts(ctx, t.Native, t.Sandbox)
}
