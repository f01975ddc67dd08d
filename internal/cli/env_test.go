package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func TestSandboxCreateEnvironmentFlags(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	ref := "env:sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		vars    map[string]string
		wantErr bool
	}{
		{"variables only", []string{"--env", "A=1", "--env", "B=x=y"}, "", map[string]string{"A": "1", "B": "x=y"}, false},
		{"--env NAME", []string{"--env", "runc", "--env", "A=1"}, "runc", map[string]string{"A": "1"}, false},
		{"--environment NAME", []string{"--environment", "runsc"}, "runsc", nil, false},
		{"--env REF", []string{"--env", ref}, ref, nil, false},
		{"both, agreeing", []string{"--env", "crun", "--environment", "crun"}, "crun", nil, false},
		{"both, disagreeing", []string{"--env", "crun", "--environment", "runsc"}, "", nil, true},
		{"two names", []string{"--env", "crun", "--env", "runc"}, "", nil, true},
		{"unknown name", []string{"--env", "lxc"}, "", nil, true},
		{"bad reference", []string{"--environment", "env:sha256:12"}, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.creates)
			code, stdout, stderr := runCLI(ctx, f, append([]string{"sandbox", "create", "--no-wait"}, tc.args...)...)
			if tc.wantErr {
				if code != 2 || len(f.creates) != before {
					t.Fatalf("exit %d (%s %s), %d creates; want a usage error and none", code, stdout, stderr, len(f.creates)-before)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s %s", code, stdout, stderr)
			}
			got := f.creates[len(f.creates)-1]
			if got.Environment != tc.env || len(got.Env) != len(tc.vars) {
				t.Fatalf("request environment %q env %v, want %q %v", got.Environment, got.Env, tc.env, tc.vars)
			}
			for k, v := range tc.vars {
				if got.Env[k] != v {
					t.Fatalf("env %v, want %v", got.Env, tc.vars)
				}
			}
		})
	}
	// run takes the same flags.
	if code, _, stderr := runCLI(ctx, f, "run", "--env", "runsc", "--", "echo", "hi"); code != 0 || f.creates[len(f.creates)-1].Environment != "runsc" {
		t.Fatalf("run --env runsc: %d %s %+v", code, stderr, f.creates[len(f.creates)-1])
	}
}

func TestEnvList(t *testing.T) {
	list := apiv1.EnvironmentList{Environments: []apiv1.Environment{
		{Ref: "env:sha256:" + strings.Repeat("12", 32), Name: "runsc", Isolation: "user-space-kernel", Enabled: true, Available: true, Default: true,
			Snapshot: "memory", OOMScope: "sandbox", Runtime: apiv1.EnvironmentRuntime{Name: "runsc", Version: "runsc version release-1\nspec: 1.1", BinaryDigest: "sha256:" + strings.Repeat("0", 64)},
			Host: "linux/amd64", Guest: "linux/amd64", SchemaVersion: 1},
		{Ref: "env:sha256:" + strings.Repeat("34", 32), Name: "crun", Isolation: "shared-kernel", Snapshot: "none", OOMScope: "process",
			Reason: "probe crun: boom", Host: "linux/amd64", Guest: "linux/amd64", SchemaVersion: 1},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/environments" || r.Header.Get("Authorization") != "Bearer key_test" {
			writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no"})
			return
		}
		writeJSON(w, 200, list)
	}))
	defer srv.Close()
	f := &fakeServer{srv: srv}
	ctx := context.Background()
	code, stdout, stderr := runCLI(ctx, f, "env", "list")
	if code != 0 {
		t.Fatalf("env list: %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		squash(lines[1]) != "runsc env:sha256:121212121212 user-space-kernel memory yes yes yes runsc version release-1 -" ||
		squash(lines[2]) != "crun env:sha256:343434343434 shared-kernel none no no no - probe crun: boom" {
		t.Fatalf("table:\n%s", stdout)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "env", "list")
	var got apiv1.EnvironmentList
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || len(got.Environments) != 2 || got.Environments[0].Ref != list.Environments[0].Ref {
		t.Fatalf("json: %d %s", code, stdout)
	}
}

func TestServerEnvironmentFlags(t *testing.T) {
	for _, tc := range []struct {
		runtime string
		envs    []string
		want    string
		wantErr bool
	}{
		{want: ""},
		{runtime: "runc", want: "runc"},
		{envs: []string{"runsc", "runc"}, want: "runsc,runc"},
		{runtime: "crun", envs: []string{"runsc"}, want: "crun,runsc"},
		{runtime: "runsc", envs: []string{"runsc", "runc"}, want: "runsc,runc"},
		{envs: []string{"runc", "runc"}, wantErr: true},
		{envs: []string{"runc", "runsc", "runc"}, wantErr: true},
		{envs: []string{"firecracker"}, wantErr: true},
		{envs: []string{"runsc", "qemu"}, want: "runsc,qemu"},
		{runtime: "docker", wantErr: true},
	} {
		got, err := serverFlags{runtime: tc.runtime, envs: tc.envs}.environments()
		var names []string
		for _, n := range got {
			names = append(names, string(n))
		}
		if (err != nil) != tc.wantErr || strings.Join(names, ",") != tc.want {
			t.Errorf("--runtime %q --env %v = %v, %v; want %q, error %v", tc.runtime, tc.envs, names, err, tc.want, tc.wantErr)
		}
	}
}
