package oci

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/environment"
)

func TestProbe(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, flavor)
			start := time.Now()
			info, err := Probe(context.Background(), cfg, agent)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("probe of %s %s took %v", info.Name, info.Version, time.Since(start))
			if info.Name != string(flavor) || info.Version == "" || info.Binary == "" {
				t.Fatalf("Info = %+v", info)
			}
			wantIso := environment.IsolationSharedKernel
			if flavor == FlavorRunsc {
				wantIso = environment.IsolationUserSpaceKernel
			}
			if info.Isolation != wantIso {
				t.Fatalf("Isolation = %s, want %s", info.Isolation, wantIso)
			}
			// Only the shared agent filesystem stays, holding the agent the
			// probe ran.
			entries, err := os.ReadDir(cfg.StateRoot)
			if err != nil || len(entries) != 1 || entries[0].Name() != agentFSName {
				t.Fatalf("state root after probe: %v entries, %v", len(entries), err)
			}
			if files, err := os.ReadDir(filepath.Join(cfg.StateRoot, agentFSName)); err != nil || len(files) != 1 {
				t.Fatalf("shared agent filesystem after probe: %v files, %v", len(files), err)
			}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.run(context.Background(), "list", "--quiet")
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Fatalf("runtime still lists containers after probe: %q, %v", out, err)
			}
		})
	}
}

func TestProbeRemovesStaleProbes(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	cfg := testConfig(t, FlavorRunc)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// An interrupted probe: its directory and a created container.
	name := probePrefix + "0123456789abcdef"
	dir := cfg.StateRoot + "/" + name
	if err := os.MkdirAll(dir+"/rootfs", 0o755); err != nil {
		t.Fatal(err)
	}
	cg, _ := r.cgroupParent.Join(name)
	spec, err := r.ociSpec(specParams{args: []string{GuestAgentPath, "--version"}, rootfs: dir + "/rootfs", hostname: "p", cgroup: cg, agentBinary: agent})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(dir+"/config.json", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.runDetached(context.Background(), dir+"/log", "", "create", "--bundle", dir, name); err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(context.Background(), cfg, agent); err != nil {
		t.Fatal(err)
	}
	if out, err := r.run(context.Background(), "list", "--quiet"); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("containers after probe: %q, %v", out, err)
	}
	if entries := probeLeftovers(t, cfg.StateRoot); len(entries) != 0 {
		t.Fatalf("probe left %q in the state root", entries)
	}
	if ok, err := r.cgroups.Exists(cg); err != nil || ok {
		t.Fatalf("stale probe cgroup exists = %v, %v", ok, err)
	}
}

func TestProbeFailsWithABrokenAgent(t *testing.T) {
	airtest.RequireRoot(t)
	cfg := testConfig(t, FlavorRunc)
	// A shell script is not a static binary: it cannot run in the empty
	// root filesystem, so the probe must fail and say so.
	script := t.TempDir() + "/fake-agent"
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho airlock-agent fake\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(context.Background(), cfg, script); err == nil {
		t.Fatal("probe succeeded with an agent that cannot run in the container")
	}
	if entries := probeLeftovers(t, cfg.StateRoot); len(entries) != 0 {
		t.Fatalf("probe left %q in the state root", entries)
	}
}

// probeLeftovers lists the state root's entries but the shared agent
// filesystem.
func probeLeftovers(t *testing.T, stateRoot string) []string {
	t.Helper()
	entries, err := os.ReadDir(stateRoot)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != agentFSName {
			out = append(out, e.Name())
		}
	}
	return out
}
