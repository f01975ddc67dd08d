package agentproto

import (
	"strings"
	"testing"
)

func TestParseListenAddr(t *testing.T) {
	long := "/" + strings.Repeat("a", maxUnixPath)
	tests := []struct {
		in      string
		want    ListenAddr
		wantErr string
	}{
		{in: "unix:/run/airlock/agent.sock", want: ListenAddr{Scheme: SchemeUnix, Path: "/run/airlock/agent.sock"}},
		{in: "serial:/dev/vport0p1", want: ListenAddr{Scheme: SchemeSerial, Path: "/dev/vport0p1"}},
		{in: "serial:" + long, want: ListenAddr{Scheme: SchemeSerial, Path: long}},
		{in: "serial:airlock.agent", want: ListenAddr{Scheme: SchemeSerial, Path: "airlock.agent"}},
		{in: "serial:port_1-x", want: ListenAddr{Scheme: SchemeSerial, Path: "port_1-x"}},
		{in: "serial:" + strings.Repeat("p", maxPortName), want: ListenAddr{Scheme: SchemeSerial, Path: strings.Repeat("p", maxPortName)}},
		{in: "serial:" + strings.Repeat("p", maxPortName+1), wantErr: "port name"},
		{in: "serial:.hidden", wantErr: "port name"},
		{in: "serial:-x", wantErr: "port name"},
		{in: "serial:a/b", wantErr: "port name"},
		{in: "serial:a b", wantErr: "port name"},
		{in: "serial:", wantErr: "absolute"},
		{in: "unix:airlock.agent", wantErr: "absolute"},
		{in: "", wantErr: "SCHEME:PATH"},
		{in: "/run/agent.sock", wantErr: "SCHEME:PATH"},
		{in: "tcp:/x", wantErr: "unknown scheme"},
		{in: "UNIX:/x", wantErr: "unknown scheme"},
		{in: "unix:", wantErr: "absolute"},
		{in: "unix:agent.sock", wantErr: "absolute"},
		{in: "unix:/run//agent.sock", wantErr: "not clean"},
		{in: "unix:/run/agent.sock/", wantErr: "not clean"},
		{in: "unix:/run/../agent.sock", wantErr: "not clean"},
		{in: "unix:/", wantErr: "name a file"},
		{in: "unix:/a\x00b", wantErr: "NUL"},
		{in: "unix:" + long, wantErr: "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseListenAddr(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseListenAddr(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseListenAddr(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseListenAddr(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func FuzzParseListenAddr(f *testing.F) {
	for _, s := range []string{"unix:/run/a.sock", "serial:/dev/vport0p1", "serial:airlock.agent", "serial:a/b", "unix:", "x", "unix:/a/../b", "tcp:/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseListenAddr(s)
		if err != nil {
			return
		}
		if a.String() != s {
			t.Fatalf("String() = %q, want %q", a.String(), s)
		}
		b, err := ParseListenAddr(a.String())
		if err != nil || b != a {
			t.Fatalf("reparse of %q = %+v, %v", a.String(), b, err)
		}
		if a.IsPortName() {
			if !validPortName(a.Path) {
				t.Fatalf("accepted bad port name %q", a.Path)
			}
			return
		}
		if a.Path[0] != '/' || strings.IndexByte(a.Path, 0) >= 0 {
			t.Fatalf("accepted bad path %q", a.Path)
		}
	})
}
