package integration

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
	"github.com/airlockdev/airlock/internal/model"
)

// TestEgressSecretInjection: a project's secret reaches its host through
// the proxy, set by the proxy on the sandbox's request that carries only
// the placeholder; the placeholder sent to another host is blocked and
// logged; and the value is nowhere the sandbox could read it (the
// environment and memory of its processes, its files) nor in clear in the
// server's data dir (the store keeps it sealed).
func TestEgressSecretInjection(t *testing.T) {
	bins := build(t)
	attackBin := airtest.BuildBinary(t, "./integration/testdata/egressattack")
	env := newReplayEnv(t, bins, "runc", attackBin, replayPolicy)
	ctx := ctxFor(t, 5*time.Minute)
	c := env.s.client()

	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	value := "sk-airlock-test-" + hex.EncodeToString(raw)
	if _, err := env.s.apiJSON(ctx, "PUT", "/v1/secrets/upstream-key", map[string]any{
		"value": value, "hosts": []string{allowedName},
	}, nil); err != nil {
		t.Fatal(err)
	}
	const placeholder = "Authorization: Bearer airlock-secret-upstream-key"

	t.Run("injected-for-its-host", func(t *testing.T) {
		env.n.ResetRequests()
		res := execIn(ctx, t, c, env.sb, "/tmp/egressattack", "tls", allowedName+":443", allowedName, allowedName, placeholder)
		if res.exitCode != 0 {
			t.Fatalf("request to the secret's host: %+v", res)
		}
		reqs := env.n.RequestsTo(allowedAddr)
		if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+value {
			t.Fatalf("the secret's host did not get the injected value: %d requests, Authorization %q", len(reqs), authOf(reqs))
		}
		if strings.Contains(res.stdout, value) {
			t.Fatal("the sandbox saw the value in the answer")
		}
	})
	t.Run("placeholder-to-another-host", func(t *testing.T) {
		env.n.ResetRequests()
		res := execIn(ctx, t, c, env.sb, "/tmp/egressattack", "tls", "shared-ok.example:443", "shared-ok.example", "shared-ok.example", placeholder)
		if res.exitCode == 0 {
			t.Fatalf("a placeholder went to a host the secret is not for: %+v", res)
		}
		if reqs := env.n.RequestsTo(sharedAddr); len(reqs) != 0 {
			t.Fatalf("shared-ok.example received %d requests (Authorization %q)", len(reqs), authOf(reqs))
		}
		var log struct {
			Decisions []struct {
				Rule string `json:"rule"`
				Host string `json:"host"`
			} `json:"decisions"`
		}
		if _, err := env.s.apiJSON(ctx, "GET", "/v1/sandboxes/"+env.sb.String()+"/egress/decisions", nil, &log); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range log.Decisions {
			found = found || (d.Rule == "secret-placeholder" && d.Host == "shared-ok.example")
		}
		if !found {
			t.Fatalf("no secret-placeholder denial in the decision log: %+v", log.Decisions)
		}
	})
	t.Run("never-in-the-sandbox", func(t *testing.T) {
		needle := []byte(value)
		pids := sandboxPids(t, env.sb)
		if len(pids) == 0 {
			t.Fatal("no process of the sandbox found in its cgroup")
		}
		// The scans find what is there: every process has PATH in its
		// memory, and a file the sandbox writes is under the data dir.
		if memoryContains(t, pids[0], []byte("PATH=/")) == "" {
			t.Fatalf("control: PATH=/ not found in the memory of sandbox process %d", pids[0])
		}
		control := "control-" + hex.EncodeToString(raw[:4]) + "-token"
		if res := execIn(ctx, t, c, env.sb, "sh", "-c", "echo "+control+" | rev > /tmp/control"); res.exitCode != 0 {
			t.Fatalf("write the control file: %+v", res)
		}
		if hits := filesContaining(env.s.dataDir, []byte(reverse(control))); len(hits) == 0 {
			t.Fatal("control: a file the sandbox wrote was not found under the data dir")
		}
		for _, pid := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && bytes.Contains(b, needle) {
				t.Errorf("the value is in the environment of sandbox process %d", pid)
			}
			if hit := memoryContains(t, pid, needle); hit != "" {
				t.Errorf("the value is in the memory of sandbox process %d (%s)", pid, hit)
			}
		}
		// The sandbox's files (its writable layer lives under the data
		// dir) and the store: nothing holds the value in clear.
		if hits := filesContaining(env.s.dataDir, needle); len(hits) > 0 {
			t.Errorf("the value is in clear in %v", hits)
		}
	})
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

func authOf(reqs []fakenet.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Header.Get("Authorization"))
	}
	return out
}

// sandboxPids lists the host PIDs in the sandbox's cgroups (every
// hierarchy, every level below the sandbox's own).
func sandboxPids(t *testing.T, id model.SandboxID) []int {
	t.Helper()
	seen := map[int]bool{}
	var pids []int
	for _, dir := range sandboxCgroups([]model.SandboxID{id}) {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// memoryContains scans the readable mappings of a process for needle and
// says where it found it ("" when nowhere).
func memoryContains(t *testing.T, pid int, needle []byte) string {
	t.Helper()
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "" // exited
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Errorf("open the memory of %d: %v", pid, err)
		return ""
	}
	defer mem.Close()
	sc := bufio.NewScanner(maps)
	buf := make([]byte, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[1][0] != 'r' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end-start > 1<<30 {
			continue
		}
		// Overlapping reads, so a value across a buffer boundary is seen.
		for off := start; off < end; off += uint64(len(buf) - len(needle)) {
			n, _ := mem.ReadAt(buf[:min(uint64(len(buf)), end-off)], int64(off))
			if bytes.Contains(buf[:n], needle) {
				return sc.Text()
			}
			if n < len(needle) {
				break
			}
		}
	}
	return ""
}

// filesContaining lists the regular files under root whose bytes contain
// needle: the store, the sandboxes' writable layers (through the mounts of
// their disk images, which WalkDir enters), everything else of the data
// dir. Files over 256 MiB (the disk images themselves, mostly unwritten
// extents, whose files are seen through their mounts) are skipped, and so
// are the holes of sparse files.
func filesContaining(root string, needle []byte) []string {
	var hits []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 256<<20 {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		if dataContains(f, needle) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits
}

// dataContains reads the data segments of f (SEEK_DATA/SEEK_HOLE) looking
// for needle, with overlapping reads.
func dataContains(f *os.File, needle []byte) bool {
	fd := int(f.Fd())
	buf := make([]byte, 1<<20)
	var off int64
	for {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			return false // ENXIO: no data after off
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return false
		}
		for pos := start; pos < end; {
			want := min(int64(len(buf)), end-pos)
			n, _ := f.ReadAt(buf[:want], pos)
			if bytes.Contains(buf[:n], needle) {
				return true
			}
			if n <= len(needle) {
				break
			}
			pos += int64(n - len(needle) + 1)
		}
		off = end
	}
}
