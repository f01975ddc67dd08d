package userns

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
)

// The test binary is its own helper.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == HelperName {
		Main()
	}
	os.Exit(m.Run())
}

// testHost is the test's namespace owner: below the ranges of Airlock's
// default pool (2^30 on) and of the benchmark's peers (2^30 - 65536).
const testHost = 1<<30 - 3*65536

// helperBinary copies the test binary where any user may run it (the go
// tool's build directory is root's alone).
func helperBinary(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "airlock-userns-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := filepath.Join(dir, "helper")
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCreateOwnedWithLimits: the namespace is owned by the mapping's first
// host id, not by root (who called Create), maps the range, and has the
// limits asked for; no process of the helper is left.
func TestCreateOwnedWithLimits(t *testing.T) {
	airtest.RequireRoot(t)
	nsenter := airtest.RequireBinary(t, "nsenter")
	helper := helperBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lim := Limits{
		Sysctls: map[Sysctl]int64{MaxInotifyInstances: 7, MaxUserNamespaces: 0, MaxMntNamespaces: 3},
		Rlimits: map[Rlimit]uint64{RlimitSigpending: 1000},
	}
	m := Mapping{Host: testHost, Size: 65536}
	ns, err := Create(ctx, helper, m, lim)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if owner, err := Owner(ns); err != nil || owner != testHost {
		t.Fatalf("Owner = %d, %v; want %d", owner, err, testHost)
	}
	// A process that joins the namespace (nsenter, root here) sees its
	// maps and its limits.
	cmd := exec.Command(nsenter, "--user=/proc/self/fd/3", "--setuid", "0", "--setgid", "0", "--",
		"sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map /proc/sys/user/max_inotify_instances /proc/sys/user/max_user_namespaces /proc/sys/user/max_mnt_namespaces")
	cmd.ExtraFiles = []*os.File{ns}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	want := []string{"0", strconv.Itoa(testHost), "65536", "0", strconv.Itoa(testHost), "65536", "7", "0", "3"}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("maps and limits seen in the namespace: %q, want %q", f, want)
	}
	if out, err := exec.Command("pgrep", "-u", strconv.Itoa(testHost)).CombinedOutput(); err == nil {
		t.Errorf("processes of the owner left: %s", out)
	}
}

// TestCreateRefuses: a root-owned namespace, an id range past the last id
// and a helper that is not one are refused, with nothing left running.
func TestCreateRefuses(t *testing.T) {
	airtest.RequireRoot(t)
	helper := helperBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name   string
		helper string
		m      Mapping
		lim    Limits
		want   string
	}{
		{"root owner", helper, Mapping{Host: 0, Size: 65536}, Limits{}, "must not be host root"},
		{"past the last id", helper, Mapping{Host: 1<<32 - 10, Size: 65536}, Limits{}, "invalid mapping"},
		{"not a helper", "/bin/true", Mapping{Host: testHost, Size: 65536}, Limits{}, "unexpected answer"},
		{"ceiling above the hard limit", helper, Mapping{Host: testHost, Size: 65536},
			Limits{Rlimits: map[Rlimit]uint64{RlimitSigpending: 1 << 62}}, "above this process's hard limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns, err := Create(ctx, tt.helper, tt.m, tt.lim)
			if err == nil {
				ns.Close()
				t.Fatal("Create succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Create = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		want    Limits
		wantErr bool
	}{
		{nil, Limits{Sysctls: map[Sysctl]int64{}, Rlimits: map[Rlimit]uint64{}}, false},
		{[]string{"max_inotify_instances=128", "RLIMIT_MSGQUEUE=819200"},
			Limits{Sysctls: map[Sysctl]int64{MaxInotifyInstances: 128}, Rlimits: map[Rlimit]uint64{RlimitMsgqueue: 819200}}, false},
		{[]string{"max_inotify_instances"}, Limits{}, true},
		{[]string{"max_inotify_instances=-1"}, Limits{}, true},
		{[]string{"max_inotify_instances=4294967296"}, Limits{}, true},
		{[]string{"../../fs/inotify/max_user_instances=1"}, Limits{}, true},
		{[]string{"RLIMIT_NOFILE=1"}, Limits{}, true},
	} {
		got, err := parseLimits(tt.args)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("parseLimits(%q) = %+v, %v", tt.args, got, err)
		}
		if err == nil {
			if back, _ := parseLimits(got.args()); !reflect.DeepEqual(back, got) {
				t.Errorf("args round trip of %+v = %+v", got, back)
			}
		}
	}
}

// BenchmarkCreate measures what a runc or crun create pays for its user
// namespace (the helper's two execs), with the sandboxes' limits.
func BenchmarkCreate(b *testing.B) {
	airtest.RequireRoot(b)
	helper := helperBinary(b)
	lim := Limits{Sysctls: map[Sysctl]int64{MaxInotifyInstances: 128, MaxInotifyWatches: 65536, MaxUserNamespaces: 0, MaxMntNamespaces: 8},
		Rlimits: map[Rlimit]uint64{RlimitSigpending: 8192, RlimitMsgqueue: 819200}}
	for b.Loop() {
		ns, err := Create(context.Background(), helper, Mapping{Host: testHost, Size: 65536}, lim)
		if err != nil {
			b.Fatal(err)
		}
		ns.Close()
	}
}
