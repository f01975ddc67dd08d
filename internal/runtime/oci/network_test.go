package oci

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// The template's CA bundle is read inside the template: a symlink cannot
// make the host's files part of a sandbox's trust store.
func TestTemplateBundle(t *testing.T) {
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, certs string)
		want  string
	}{
		{"none", func(*testing.T, string) {}, ""},
		{"regular", func(t *testing.T, certs string) { write(t, filepath.Join(certs, "ca-certificates.crt"), "BUNDLE") }, "BUNDLE"},
		{"symlink inside", func(t *testing.T, certs string) {
			write(t, filepath.Join(certs, "real.crt"), "REAL")
			symlink(t, "/etc/ssl/certs/real.crt", filepath.Join(certs, "ca-certificates.crt"))
		}, "REAL"},
		{"absolute symlink to a host file", func(t *testing.T, certs string) {
			symlink(t, hostFile, filepath.Join(certs, "ca-certificates.crt"))
		}, ""},
		{"relative symlink out", func(t *testing.T, certs string) {
			symlink(t, "../../../../../../../../.."+hostFile, filepath.Join(certs, "ca-certificates.crt"))
		}, ""},
		{"fedora", func(t *testing.T, certs string) {
			write(t, filepath.Join(certs, "..", "..", "pki", "tls", "certs", "ca-bundle.crt"), "FEDORA")
		}, "FEDORA"},
		{"debian first", func(t *testing.T, certs string) {
			write(t, filepath.Join(certs, "..", "cert.pem"), "OTHER")
			write(t, filepath.Join(certs, "ca-certificates.crt"), "DEBIAN")
		}, "DEBIAN"},
		{"directory", func(t *testing.T, certs string) {
			if err := os.Mkdir(filepath.Join(certs, "ca-certificates.crt"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := t.TempDir()
			certs := filepath.Join(tpl, "etc", "ssl", "certs")
			if err := os.MkdirAll(certs, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, certs)
			got, err := templateBundle(tpl)
			if err != nil || string(got) != tc.want {
				t.Fatalf("templateBundle = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestApplyNetwork(t *testing.T) {
	airtest.RequireRoot(t) // the network files' tmpfs
	newSpec := func() *specs.Spec {
		return &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}}}}
	}
	tpl := t.TempDir()
	write(t, filepath.Join(tpl, "etc", "ssl", "certs", "ca-certificates.crt"), "TEMPLATE-CAS")
	dirs := dirsAt(t.TempDir())
	t.Cleanup(func() {
		if err := (&Runtime{}).unmountAll(context.Background(), dirs.state); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	// No network: the spec is left as it is (a new, empty netns).
	s := newSpec()
	if err := applyNetwork(FlavorRunsc, s, runtime.Spec{RootFS: runtime.RootFS{Lower: tpl}}, dirs); err != nil {
		t.Fatal(err)
	}
	if s.Linux.Namespaces[1].Path != "" || len(s.Mounts) != 0 {
		t.Fatalf("spec changed without a network: %+v", s)
	}

	gw := netip.MustParseAddr("10.213.0.1")
	n := &runtime.Network{NetnsPath: "/data/netns/sbx", GuestAddr: netip.MustParsePrefix("10.213.0.2/30"), Gateway: gw, DNS: gw, CACertPEM: []byte("CA\n")}
	s = newSpec()
	if err := applyNetwork(FlavorRunsc, s, runtime.Spec{RootFS: runtime.RootFS{Lower: tpl}, Network: n}, dirs); err != nil {
		t.Fatal(err)
	}
	if s.Linux.Namespaces[1].Path != n.NetnsPath {
		t.Errorf("netns path %q", s.Linux.Namespaces[1].Path)
	}
	want := map[string]string{
		"/etc/resolv.conf":                   "# written by Airlock: the sandbox's only name server\nnameserver 10.213.0.1\noptions edns0\n",
		"/etc/airlock/ca.crt":                "CA\n",
		"/etc/ssl/certs/ca-certificates.crt": "TEMPLATE-CAS\nCA\n",
	}
	for _, m := range s.Mounts {
		w, ok := want[m.Destination]
		if !ok {
			t.Errorf("unexpected mount %+v", m)
			continue
		}
		delete(want, m.Destination)
		if !slices.Contains(m.Options, "ro") || m.Type != "bind" {
			t.Errorf("mount %s is not a read-only bind: %+v", m.Destination, m)
		}
		data, err := os.ReadFile(m.Source)
		if err != nil || string(data) != w {
			t.Errorf("%s: %q, %v; want %q", m.Destination, data, err, w)
		}
		if fi, err := os.Stat(m.Source); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, %v", m.Source, fi.Mode(), err)
		}
	}
	for dst := range want {
		t.Errorf("no mount at %s", dst)
	}
	assertNetFilesOnTmpfs(t, dirs, 3)

	// A second prepare (a restore, a retried create) replaces the tmpfs
	// with a fresh one holding the new files: no stacked layers, nothing
	// of the old content.
	n2 := *n
	n2.DNS, n2.CACertPEM = netip.MustParseAddr("10.213.0.5"), nil
	s = newSpec()
	if err := applyNetwork(FlavorRunsc, s, runtime.Spec{RootFS: runtime.RootFS{Lower: tpl}, Network: &n2}, dirs); err != nil {
		t.Fatal(err)
	}
	if len(s.Mounts) != 1 || s.Mounts[0].Destination != "/etc/resolv.conf" {
		t.Fatalf("mounts without a CA: %+v", s.Mounts)
	}
	if data, err := os.ReadFile(s.Mounts[0].Source); err != nil || !strings.Contains(string(data), "nameserver 10.213.0.5\n") {
		t.Errorf("resolv.conf after the second prepare: %q, %v", data, err)
	}
	assertNetFilesOnTmpfs(t, dirs, 1)
	if !dirsJoin(t, dirs) {
		t.Error("joinsNetns is false after applyNetwork")
	}

	if err := applyNetwork(FlavorRunsc, newSpec(), runtime.Spec{Network: &runtime.Network{NetnsPath: "relative", DNS: gw}}, dirs); err == nil {
		t.Error("a relative netns path was accepted")
	}
	if err := applyNetwork(FlavorRunsc, newSpec(), runtime.Spec{Network: &runtime.Network{NetnsPath: "/x"}}, dirs); err == nil {
		t.Error("a network without DNS was accepted")
	}
}

// assertNetFilesOnTmpfs checks that the network files are on one tmpfs of
// their own (one mount, source netFSSource) holding exactly files files,
// so that a bind mount of one shows /<name> on a tmpfs in the guest.
func assertNetFilesOnTmpfs(t *testing.T, dirs sandboxDirs, files int) {
	t.Helper()
	mounts, err := rootfs.MountsAt(dirs.netFilesDir())
	if err != nil || len(mounts) != 1 || mounts[0].FSType != "tmpfs" || mounts[0].Source != netFSSource || mounts[0].Root != "/" {
		t.Fatalf("mounts at %s: %+v, %v; want one tmpfs %s", dirs.netFilesDir(), mounts, err, netFSSource)
	}
	entries, err := os.ReadDir(dirs.netFilesDir())
	if err != nil || len(entries) != files {
		t.Errorf("the network files' tmpfs holds %v (%v); want %d files", entries, err, files)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o644 {
			t.Errorf("%s: mode %v; want a regular file, 0644", e.Name(), fi.Mode())
		}
	}
}

func dirsJoin(t *testing.T, dirs sandboxDirs) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(dirs.netDir(), netnsMarker))
	return err == nil
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
