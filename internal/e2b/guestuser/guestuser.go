// Package guestuser resolves the Unix user an E2B request names ("user",
// "root", or none) to the numeric IDs and home directory inside one
// sandbox, reading the sandbox's own /etc/passwd through Airlock's API.
//
// E2B selects users by name (Basic auth user name on RPCs, ?username= on
// /files) and resolves relative paths against that user's home; Airlock's
// API takes numeric IDs and absolute paths. When no user is named, E2B's
// default user "user" is used if the sandbox has one, else root.
package guestuser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// DefaultName is E2B's default user.
const DefaultName = "user"

// maxPasswd bounds how much of /etc/passwd is read.
const maxPasswd = 1 << 20

// ErrUnknown is wrapped when the sandbox has no user of the given name.
var ErrUnknown = errors.New("unknown user")

// User is one account of a sandbox.
type User struct {
	Name string
	UID  int64
	GID  int64
	Home model.GuestPath
}

// Accounts are a sandbox's users (/etc/passwd) and group names
// (/etc/group).
type Accounts struct {
	Users  []User
	Groups map[int64]string
}

// Pick is Pick of a.Users.
func (a Accounts) Pick(name string) (User, error) { return Pick(a.Users, name) }

// UserName is the name of the first account with uid, or the number when
// there is none (as ls shows an owner without a name).
func (a Accounts) UserName(uid int64) string {
	for _, u := range a.Users {
		if u.UID == uid {
			return u.Name
		}
	}
	if uid == 0 {
		return "root"
	}
	return strconv.FormatInt(uid, 10)
}

// GroupName is the name of group gid, or the number when there is none.
func (a Accounts) GroupName(gid int64) string {
	if n, ok := a.Groups[gid]; ok {
		return n
	}
	if gid == 0 {
		return "root"
	}
	return strconv.FormatInt(gid, 10)
}

// Lookup returns the sandbox's account called name; name "" is E2B's
// default user ("user" when the sandbox has it, else root).
func Lookup(ctx context.Context, native *client.Client, sb model.SandboxID, name string) (User, error) {
	acc, err := ReadAccounts(ctx, native, sb)
	if err != nil {
		return User{}, err
	}
	return acc.Pick(name)
}

// ReadAccounts reads the sandbox's /etc/passwd and /etc/group (a sandbox
// without /etc/group has no group names).
func ReadAccounts(ctx context.Context, native *client.Client, sb model.SandboxID) (Accounts, error) {
	body, _, err := native.Download(ctx, sb, "/etc/passwd")
	if err != nil {
		return Accounts{}, fmt.Errorf("read /etc/passwd of %s: %w", sb, err)
	}
	users, err := Parse(io.LimitReader(body, maxPasswd))
	body.Close()
	if err != nil {
		return Accounts{}, fmt.Errorf("/etc/passwd of %s: %w", sb, err)
	}
	acc := Accounts{Users: users}
	body, _, err = native.Download(ctx, sb, "/etc/group")
	switch {
	case client.IsNotFound(err):
		return acc, nil
	case err != nil:
		return Accounts{}, fmt.Errorf("read /etc/group of %s: %w", sb, err)
	}
	defer body.Close()
	if acc.Groups, err = ParseGroups(io.LimitReader(body, maxPasswd)); err != nil {
		return Accounts{}, fmt.Errorf("/etc/group of %s: %w", sb, err)
	}
	return acc, nil
}

// ParseGroups reads group(5) lines into GID → name (the first name of a
// GID wins, as getgrgid gives it); malformed lines are skipped.
func ParseGroups(r io.Reader) (map[int64]string, error) {
	out := make(map[int64]string)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) != 4 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		gid, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || gid < 0 || gid > 1<<32-2 {
			continue
		}
		if _, ok := out[gid]; !ok {
			out[gid] = f[0]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse group: %w", err)
	}
	return out, nil
}

// Pick returns the user called name from users; "" picks E2B's default
// user, or root when there is none (root is always there: a sandbox
// without a passwd entry for it still runs as UID 0).
func Pick(users []User, name string) (User, error) {
	want := name
	if want == "" {
		want = DefaultName
	}
	for _, u := range users {
		if u.Name == want {
			return u, nil
		}
	}
	if name == "" || name == "root" {
		for _, u := range users {
			if u.UID == 0 {
				return u, nil
			}
		}
		return User{Name: "root", UID: 0, GID: 0, Home: "/root"}, nil
	}
	return User{}, fmt.Errorf("%w %q", ErrUnknown, name)
}

// Parse reads passwd(5) lines. Malformed lines are skipped, as libc does;
// a home that is not a clean absolute path becomes "/".
func Parse(r io.Reader) ([]User, error) {
	var users []User
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) != 7 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.ParseInt(f[2], 10, 64)
		gid, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 || uid > 1<<32-2 || gid > 1<<32-2 {
			continue
		}
		home, err := model.ParseGuestPath(f[5])
		if err != nil {
			home = "/"
		}
		users = append(users, User{Name: f[0], UID: uid, GID: gid, Home: home})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse passwd: %w", err)
	}
	return users, nil
}
