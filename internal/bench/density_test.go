package bench

import (
	"bytes"
	"regexp"
	"testing"
	"time"
)

func TestMeminfoField(t *testing.T) {
	content := "MemTotal:       24683520 kB\nMemAvailable:   24120000 kB\nPss:                 100 kB\nWeird:   12 MB\n"
	tests := []struct {
		field string
		want  int64
		ok    bool
	}{
		{"MemTotal", 24683520 << 10, true},
		{"MemAvailable", 24120000 << 10, true},
		{"Pss", 100 << 10, true},
		{"Weird", 0, false},
		{"Missing", 0, false},
	}
	for _, tt := range tests {
		got, err := meminfoField(content, tt.field)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("meminfoField(%s) = %d, %v; want %d, ok %v", tt.field, got, err, tt.want, tt.ok)
		}
	}
}

func TestDensityRow(t *testing.T) {
	before := hostMemory{available: 1000 << 20, fields: map[string]int64{"AnonPages": 10 << 20, "Shmem": 4 << 20}, selfRSS: 50 << 20}
	after := hostMemory{available: 960 << 20, fields: map[string]int64{"AnonPages": 30 << 20, "Shmem": 2 << 20}, selfRSS: 54 << 20}
	m := groupMemory{cgroupBytes: 12 << 20, pssBytes: 16 << 20, procs: 8}
	r := densityRow("airlock-runc", KindAirlock, "runc", 4, before, after, m)
	if r.HostMiB != 10 || r.CgroupMiB != 3 || r.PssMiB != 4 || r.FootprintMiB != 4 || r.Procs != 2 {
		t.Errorf("row = %+v", r)
	}
	if r.Meminfo["AnonPages"] != 5 || r.Meminfo["Shmem"] != -0.5 || r.Meminfo[selfRSSField] != 1 {
		t.Errorf("meminfo = %+v", r.Meminfo)
	}
}

func TestDensityTargetsAndTable(t *testing.T) {
	rep := DensityReport{
		Benchmark: "airlock bench density: test", Template: "sha256:abc", MemoryMiB: 128, Idle: 10 * time.Second,
		Rows: []DensityRow{
			{Name: "airlock-runc", Kind: KindAirlock, Runtime: "runc", Count: 200, HostMiB: 4, CgroupMiB: 2.5, PssMiB: 2, FootprintMiB: 2.5, Procs: 1},
			{Name: "airlock-runsc", Kind: KindAirlock, Runtime: "runsc", Count: 50, HostMiB: 40, CgroupMiB: 20, PssMiB: 61, FootprintMiB: 61, Procs: 6},
			{Name: "airlock-crun", Kind: KindAirlock, Runtime: "crun", Count: 5, FootprintMiB: 9},
			{Name: "runc run --detach", Kind: KindRaw, Runtime: "runc", Count: 200, HostMiB: 1, CgroupMiB: 0.5, PssMiB: 0.25, FootprintMiB: 0.5, Procs: 1},
		},
		Processes: []DensityByName{{Row: "airlock-runc", Comm: "airlock-agent", Procs: 200, PssMiB: 2}},
	}
	rep.Targets = densityTargetsOf(rep.Rows)
	if len(rep.Targets) != 2 || !rep.Targets[0].Met || rep.Targets[1].Met {
		t.Fatalf("targets = %+v (runc 2.5 ≤ 3 met, runsc 61 > 60 missed, crun none)", rep.Targets)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	for name, re := range map[string]string{
		"runc row":  `^airlock-runc\s+200\s+2\.50\s+2\.50\s+2\.00\s+4\.00\s+1\.0\s+5\.00× runc run --detach$`,
		"runsc row": `^airlock-runsc\s+50\s+61\.00\s+20\.00\s+61\.00\s+40\.00\s+6\.0\s+-$`,
		"peer row":  `^runc run --detach\s+200\s+0\.50\s+0\.50\s+0\.25\s+1\.00\s+1\.0\s+-$`,
		"process":   `^airlock-runc\s+airlock-agent\s+200\s+2\.00$`,
		"target":    `^  host memory per idle runsc sandbox \(50 idle\): 61\.00 MiB \(cgroup 20\.00, Pss 61\.00; host MemAvailable drop 40\.00\), want ≤ 60 MiB: MISSED$`,
		"cleanup":   `^after deleting each set: 0 containers, 0 cgroups, 0 mounts left$`,
	} {
		if !regexp.MustCompile("(?m)" + re).MatchString(out) {
			t.Errorf("%s: no line matches %s", name, re)
		}
	}
}
