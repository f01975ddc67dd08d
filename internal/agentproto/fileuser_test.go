package agentproto

import "testing"

func TestParseFileUser(t *testing.T) {
	tests := []struct {
		in   string
		want FileUser
		ok   bool
	}{
		{"1000:1000", FileUser{1000, 1000}, true},
		{"0:0", FileUser{0, 0}, true},
		{"4294967294:7", FileUser{4294967294, 7}, true},
		{"4294967295:0", FileUser{}, false},
		{"0:4294967295", FileUser{}, false},
		{"1000", FileUser{}, false},
		{"1000:", FileUser{}, false},
		{":1000", FileUser{}, false},
		{"-1:0", FileUser{}, false},
		{"+1:0", FileUser{}, false},
		{"01:0", FileUser{}, false},
		{"1:2:3", FileUser{}, false},
		{" 1:2", FileUser{}, false},
		{"99999999999:0", FileUser{}, false},
		{"", FileUser{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseFileUser(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseFileUser(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if got != tt.want {
				t.Fatalf("ParseFileUser(%q) = %v, want %v", tt.in, got, tt.want)
			}
			if tt.ok && got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func FuzzParseFileUser(f *testing.F) {
	for _, s := range []string{"1000:1000", "0:0", "4294967294:1", "a:b", "-1:1", "01:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseFileUser(s)
		if err != nil {
			return
		}
		if u.UID > MaxFileID || u.GID > MaxFileID {
			t.Fatalf("%q parsed out of range: %v", s, u)
		}
		if u.String() != s {
			t.Fatalf("%q does not round-trip: %q", s, u.String())
		}
		if again, err := ParseFileUser(u.String()); err != nil || again != u {
			t.Fatalf("re-parse %q: %v %v", u.String(), again, err)
		}
	})
}
