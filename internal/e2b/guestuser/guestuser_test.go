package guestuser

import (
	"errors"
	"strings"
	"testing"
)

const passwd = `root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
# comment:x:5:5::/:/bin/sh
broken:x:notanumber:1::/:/bin/sh
short:x:3
user:x:1000:1000::/home/user:/bin/bash
odd:x:1001:1001::relative/home:/bin/sh
`

func TestPick(t *testing.T) {
	users, err := Parse(strings.NewReader(passwd))
	if err != nil {
		t.Fatal(err)
	}
	noUser, err := Parse(strings.NewReader("root:x:0:0::/root:/bin/sh\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		users   []User
		pick    string
		want    User
		unknown bool
	}{
		{"default is user", users, "", User{"user", 1000, 1000, "/home/user"}, false},
		{"root by name", users, "root", User{"root", 0, 0, "/root"}, false},
		{"default without user is root", noUser, "", User{"root", 0, 0, "/root"}, false},
		{"root without passwd", nil, "root", User{"root", 0, 0, "/root"}, false},
		{"relative home becomes /", users, "odd", User{"odd", 1001, 1001, "/"}, false},
		{"unknown", users, "mallory", User{}, true},
		{"user absent is unknown when named", noUser, "user", User{}, true},
		{"broken line skipped", users, "broken", User{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Pick(tc.users, tc.pick)
			if tc.unknown {
				if !errors.Is(err, ErrUnknown) {
					t.Fatalf("Pick(%q) = %+v, %v; want ErrUnknown", tc.pick, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Pick(%q) = %+v, %v; want %+v", tc.pick, got, err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(passwd)
	f.Add("a:b:c:d:e:f:g\n::::::\n")
	f.Fuzz(func(t *testing.T, s string) {
		users, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, u := range users {
			if u.Name == "" || u.UID < 0 || u.GID < 0 || !strings.HasPrefix(string(u.Home), "/") {
				t.Fatalf("bad user %+v from %q", u, s)
			}
		}
	})
}

func TestParseGroupsAndNames(t *testing.T) {
	groups, err := ParseGroups(strings.NewReader("root:x:0:\n# comment:x:5:\nuser:x:1000:\nalias:x:1000:\nbad:x:-1:\nshort:x:7\nstaff:x:50:user\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{0: "root", 1000: "user", 50: "staff"}
	if len(groups) != len(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	for gid, name := range want {
		if groups[gid] != name {
			t.Fatalf("groups %v, want %v", groups, want)
		}
	}
	acc := Accounts{Users: []User{{Name: "user", UID: 1000, GID: 1000}}, Groups: groups}
	for _, tc := range []struct {
		uid, gid  int64
		user, grp string
	}{
		{1000, 1000, "user", "user"},
		{0, 0, "root", "root"}, // root without a passwd line is still root
		{4242, 50, "4242", "staff"},
		{1000, 4343, "user", "4343"},
	} {
		if u, g := acc.UserName(tc.uid), acc.GroupName(tc.gid); u != tc.user || g != tc.grp {
			t.Errorf("%d:%d → %s:%s, want %s:%s", tc.uid, tc.gid, u, g, tc.user, tc.grp)
		}
	}
}
