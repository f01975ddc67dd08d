package cli

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

func TestParseKV(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr string
	}{
		{in: nil, want: nil},
		{in: []string{"A=1", "B=x=y", "C="}, want: map[string]string{"A": "1", "B": "x=y", "C": ""}},
		{in: []string{"A=1,B=2"}, want: map[string]string{"A": "1,B=2"}},
		{in: []string{"A"}, wantErr: `--env "A": expected KEY=VALUE`},
		{in: []string{"=1"}, wantErr: `--env "=1": the key before '=' is empty`},
		{in: []string{"A=1", "A=2"}, wantErr: `--env: key "A" given twice`},
	}
	for _, tt := range tests {
		got, err := parseKV("env", tt.in)
		if tt.wantErr != "" {
			var ue usageError
			if err == nil || err.Error() != tt.wantErr || !errors.As(err, &ue) {
				t.Errorf("%q: err = %v, want usage error %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseEnvAndMetadataFlags(t *testing.T) {
	if _, err := parseEnvFlag([]string{"1BAD=x"}); err == nil || !strings.Contains(err.Error(), "--env: invalid value: environment variable name \"1BAD\"") {
		t.Errorf("bad env name: %v", err)
	}
	if env, err := parseEnvFlag([]string{"GOOD_1=x y"}); err != nil || env["GOOD_1"] != "x y" {
		t.Errorf("good env: %v, %v", env, err)
	}
	if _, err := parseMetadataFlag([]string{"bad key=x"}); err == nil || !strings.HasPrefix(err.Error(), "--metadata: ") {
		t.Errorf("bad metadata key: %v", err)
	}
	f, err := parseMetadataFilters([]string{"team=ml", "app.io/name=a=b"})
	if err != nil || !reflect.DeepEqual(f, []client.MetadataFilter{{Key: "team", Value: "ml"}, {Key: "app.io/name", Value: "a=b"}}) {
		t.Errorf("filters: %v, %v", f, err)
	}
	if _, err := parseMetadataFilters([]string{"novalue"}); err == nil {
		t.Error("filter without = accepted")
	}
	st, err := parseStates([]string{"running,failed", "deleted"})
	if err != nil || !reflect.DeepEqual(st, []model.SandboxState{model.StateRunning, model.StateFailed, model.StateDeleted}) {
		t.Errorf("states: %v, %v", st, err)
	}
	if _, err := parseStates([]string{"runing"}); err == nil {
		t.Error("misspelt state accepted")
	}
}

func TestCreateFlagsRequest(t *testing.T) {
	f := createFlags{template: "python-3.12", cpus: 2, memoryMiB: 1024, env: []string{"A=1"}, metadata: []string{"k=v"}}
	req, err := f.request()
	if err != nil || req.Template != "python-3.12:latest" || req.CPUs != 2 || req.MemoryMiB != 1024 || req.Env["A"] != "1" || req.Metadata["k"] != "v" {
		t.Fatalf("%+v, %v", req, err)
	}
	f = createFlags{publicPorts: true, nodeSelector: []string{"zone=a", "gpu=none"}}
	req, err = f.request()
	if err != nil || !req.PublicPorts || len(req.NodeSelector) != 2 || req.NodeSelector["zone"] != "a" || req.NodeSelector["gpu"] != "none" {
		t.Fatalf("%+v, %v", req, err)
	}
	if req, err := (&createFlags{}).request(); err != nil || req.PublicPorts || req.NodeSelector != nil {
		t.Fatalf("defaults: %+v, %v", req, err)
	}
	for _, bad := range []createFlags{{template: "Bad Name"}, {template: "sha256:zz"}, {cpus: -1}, {memoryMiB: -5}, {env: []string{"X"}},
		{nodeSelector: []string{"zone"}}, {nodeSelector: []string{"zone=a", "zone=b"}}, {nodeSelector: []string{"bad key=a"}}} {
		if _, err := bad.request(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := (&commandFlags{cwd: "relative"}).request([]string{"ls"}); err == nil {
		t.Error("relative --cwd accepted")
	}
	if req, err := (&commandFlags{cwd: "/tmp", env: []string{"X=1"}}).request([]string{"ls"}); err != nil || req.Cwd != "/tmp" || req.Env["X"] != "1" {
		t.Errorf("%+v, %v", req, err)
	}
}

func TestCommandArgs(t *testing.T) {
	tests := []struct {
		cmdline []string // after the command name
		wantPos int      // positional args before the command (exec: the sandbox)
		want    []string
		wantErr bool
	}{
		{[]string{"sbx", "--", "ls", "-la"}, 1, []string{"ls", "-la"}, false},
		{[]string{"sbx", "ls", "-la"}, 1, []string{"ls", "-la"}, false},
		{[]string{"--env", "A=1", "sbx", "--", "sh", "-c", "echo --"}, 1, []string{"sh", "-c", "echo --"}, false},
		{[]string{"--", "sbx", "--", "x"}, 1, []string{"--", "x"}, false},
		{[]string{"sbx", "ls", "--env", "A=1"}, 1, []string{"ls", "--env", "A=1"}, false},
		{[]string{"sbx"}, 1, nil, true},
		{[]string{"sbx", "--"}, 1, nil, true},
		{[]string{"--", "echo", "hi"}, 0, []string{"echo", "hi"}, false},
		{[]string{"echo", "--", "hi"}, 0, []string{"echo", "--", "hi"}, false},
	}
	for _, tt := range tests {
		cmd := &cobra.Command{}
		cmd.Flags().SetInterspersed(false)
		cmd.Flags().StringArray("env", nil, "")
		if err := cmd.ParseFlags(tt.cmdline); err != nil {
			t.Fatal(err)
		}
		args := cmd.Flags().Args()[tt.wantPos:]
		got, err := commandArgs(cmd, args)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: %q, %v; want %q (error %v)", tt.cmdline, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseKV(f *testing.F) {
	f.Add("A=1", "B=x=y")
	f.Add("=", "A")
	f.Add("A=1", "A=2")
	f.Fuzz(func(t *testing.T, a, b string) {
		m, err := parseKV("env", []string{a, b})
		if err != nil {
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("non-usage error %v", err)
			}
			return
		}
		if len(m) != 2 {
			t.Fatalf("%q %q: %d entries", a, b, len(m))
		}
		for _, kv := range []string{a, b} {
			k, v, _ := strings.Cut(kv, "=")
			if k == "" || m[k] != v {
				t.Fatalf("%q parsed into %v", kv, m)
			}
		}
	})
}

func FuzzSignalNumber(f *testing.F) {
	for _, s := range []string{"KILL", "SIGTERM", "9", "RTMIN+3", "", "RTMIN+-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ok := signalNumber(s); ok && (n < 1 || n > 127) {
			t.Fatalf("%q → %d", s, n)
		}
	})
}

func TestServerDiskAndTimeoutFlags(t *testing.T) {
	ok := serverFlags{listen: "127.0.0.1:0", grace: time.Second, overcommit: 1, maxConns: 1, mutBurst: 1,
		defaultDisk: 2048, maxDisk: 4096, bodyTimeout: time.Second, usernsBase: oci.DefaultIDBase, usernsN: 1}
	opts, err := ok.options("/tmp/x", slog.DiscardHandler)
	if err != nil || opts.DefaultDiskMiB != 2048 || opts.MaxDiskMiB != 4096 || opts.BodyReadTimeout != time.Second {
		t.Fatalf("%+v, %v", opts, err)
	}
	for _, bad := range []func(f *serverFlags){
		func(f *serverFlags) { f.defaultDisk = 4097 },
		func(f *serverFlags) { f.defaultDisk = 63 },
		func(f *serverFlags) { f.maxDisk = 32 },
		func(f *serverFlags) { f.bodyTimeout = 0 },
		func(f *serverFlags) { f.usernsBase = 1000 },                      // host users inside a range
		func(f *serverFlags) { f.usernsN = 0 },                            // no range at all
		func(f *serverFlags) { f.usernsBase, f.usernsN = 1<<31, 1<<15 },   // beyond the largest id
		func(f *serverFlags) { f.vmUIDBase = 1000 },                       // VMs as host users
		func(f *serverFlags) { f.vmUIDBase, f.vmUIDN = 1<<32-10, 20 },     // beyond the largest id
		func(f *serverFlags) { f.vmUIDBase = oci.DefaultIDBase + 5 },      // inside the userns pool
		func(f *serverFlags) { f.usernsBase, f.usernsN = 3<<30-65536, 2 }, // the userns pool reaches the VM pool
		func(f *serverFlags) { f.idleDefault = -time.Second },
		func(f *serverFlags) { f.idleDefault = 31 * 24 * time.Hour },
		func(f *serverFlags) { f.retention = time.Second },
		func(f *serverFlags) { f.reapEvery = time.Millisecond },
	} {
		f := ok
		bad(&f)
		if _, err := f.options("/tmp/x", slog.DiscardHandler); err == nil {
			t.Errorf("%+v accepted", f)
		}
	}
}

func TestServerClusterFlags(t *testing.T) {
	base := serverFlags{listen: "127.0.0.1:0", grace: time.Second, overcommit: 1, maxConns: 1, mutBurst: 1,
		defaultDisk: 2048, maxDisk: 4096, bodyTimeout: time.Second, usernsBase: oci.DefaultIDBase, usernsN: 1}
	ok := base
	ok.role, ok.databaseURL, ok.advertiseURL = "node", "postgres://db/x", "http://10.0.0.5:7070/"
	ok.labels, ok.maxSandboxes, ok.placement = []string{"zone=a", "gpu=no"}, 10, "pack"
	ok.heartbeat, ok.deadAfter = time.Second, 3*time.Second
	opts, err := ok.options("/tmp/x", slog.DiscardHandler)
	if err != nil || opts.Role != model.RoleNode || opts.AdvertiseURL != "http://10.0.0.5:7070" || opts.Labels["zone"] != "a" ||
		opts.MaxSandboxes != 10 || opts.Placement != model.PlacePack || opts.NodeDeadAfter != 3*time.Second {
		t.Fatalf("%+v, %v", opts, err)
	}
	if opts, err := base.options("/tmp/x", slog.DiscardHandler); err != nil || opts.Role != model.RoleAll || opts.Placement != model.PlaceSpread {
		t.Fatalf("defaults: %+v, %v", opts, err)
	}
	for name, bad := range map[string]func(f *serverFlags){
		"unknown role":         func(f *serverFlags) { f.role = "worker" },
		"api without database": func(f *serverFlags) { f.databaseURL = "" },
		"advertise not http":   func(f *serverFlags) { f.advertiseURL = "ftp://x" },
		"advertise with query": func(f *serverFlags) { f.advertiseURL = "http://x/?a=1" },
		"label without =":      func(f *serverFlags) { f.labels = []string{"zone"} },
		"label twice":          func(f *serverFlags) { f.labels = []string{"zone=a", "zone=b"} },
		"label bad key":        func(f *serverFlags) { f.labels = []string{"bad key=a"} },
		"negative slots":       func(f *serverFlags) { f.maxSandboxes = -1 },
		"placement":            func(f *serverFlags) { f.placement = "random" },
		"heartbeat too fast":   func(f *serverFlags) { f.heartbeat = time.Millisecond },
		"dead too soon":        func(f *serverFlags) { f.deadAfter = 2 * time.Second },
	} {
		f := ok
		bad(&f)
		var ue usageError
		if _, err := f.options("/tmp/x", slog.DiscardHandler); !errors.As(err, &ue) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
}

// TestKeyToken: the offline token is a well-formed API key, new each time,
// made without a server.
func TestKeyToken(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		code, stdout, stderr := runCLI(context.Background(), nil, "admin", "key", "token")
		token := strings.TrimSpace(stdout)
		if code != 0 || stderr != "" || seen[token] {
			t.Fatalf("token: %d %q %q", code, stdout, stderr)
		}
		if _, _, err := auth.ParseAPIKey(token); err != nil {
			t.Fatalf("token %q: %v", token, err)
		}
		seen[token] = true
	}
	if code, _, _ := runCLI(context.Background(), nil, "admin", "key", "token", "extra"); code == 0 {
		t.Fatal("an argument was accepted")
	}
}

func TestServerPublicURLFlag(t *testing.T) {
	base := serverFlags{listen: "127.0.0.1:0", grace: time.Second, overcommit: 1, maxConns: 1, mutBurst: 1,
		defaultDisk: 2048, maxDisk: 4096, bodyTimeout: time.Second, usernsBase: oci.DefaultIDBase, usernsN: 1}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"https://airlock.example.com", "https://airlock.example.com"},
		{"HTTPS://airlock.example.com:8443/", "https://airlock.example.com:8443"},
		{"http://10.0.0.5:7070", "http://10.0.0.5:7070"},
	} {
		f := base
		f.publicURL = tc.in
		opts, err := f.options("/tmp/x", slog.DiscardHandler)
		if err != nil || opts.PublicURL != tc.want {
			t.Errorf("--public-url %q → %q, %v; want %q", tc.in, opts.PublicURL, err, tc.want)
		}
	}
	for _, bad := range []string{"airlock.example.com", "ftp://x", "https://", "https://u:p@x", "https://x/prefix", "https://x/?a=1", "https://x#f", "https://x?"} {
		f := base
		f.publicURL = bad
		var ue usageError
		if _, err := f.options("/tmp/x", slog.DiscardHandler); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--public-url") {
			t.Errorf("--public-url %q: err %v, want a usage error", bad, err)
		}
	}
}

func TestServerAllowedHostsFlag(t *testing.T) {
	base := serverFlags{listen: "127.0.0.1:0", grace: time.Second, overcommit: 1, maxConns: 1, mutBurst: 1,
		defaultDisk: 2048, maxDisk: 4096, bodyTimeout: time.Second, usernsBase: oci.DefaultIDBase, usernsN: 1}
	f := base
	f.allowedHosts = []string{"airlock.internal", "*.corp.example", "*"}
	opts, err := f.options("/tmp/x", slog.DiscardHandler)
	if err != nil || !slices.Equal(opts.AllowedHosts, f.allowedHosts) {
		t.Fatalf("--allowed-hosts → %q, %v", opts.AllowedHosts, err)
	}
	for _, bad := range []string{"http://x", "a b", "*.", "x.*", ""} {
		f := base
		f.allowedHosts = []string{bad}
		var ue usageError
		if _, err := f.options("/tmp/x", slog.DiscardHandler); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--allowed-hosts") {
			t.Errorf("--allowed-hosts %q: err %v, want a usage error", bad, err)
		}
	}
}
