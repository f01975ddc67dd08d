package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
)

func sampleReport() Report {
	airlock := summarizeSubject(Subject{
		Name: "airlock-runc", Kind: KindAirlock, Runtime: "runc", Isolation: environment.IsolationSharedKernel,
		Method: "client → server", Rootfs: "overlay inside the clock",
	}, []sample{
		{total: ms(90), phases: []time.Duration{ms(80), ms(2), ms(8)}},
		{total: ms(110), phases: []time.Duration{ms(95), ms(3), ms(12)}},
	}, airlockPhases)
	raw := summarizeSubject(Subject{
		Name: "runc run", Kind: KindRaw, Runtime: "runc", Isolation: environment.IsolationSharedKernel,
		Method: "fork/exec of `runc run`", Rootfs: "overlay before the clock",
	}, []sample{{total: ms(20)}, {total: ms(30)}}, nil)
	gvisor := summarizeSubject(Subject{
		Name: "runsc run", Kind: KindRaw, Runtime: "runsc", Isolation: environment.IsolationUserSpaceKernel,
		Method: "fork/exec of `runsc run`", Rootfs: "overlay before the clock",
	}, []sample{{total: ms(120)}, {total: ms(140)}}, nil)
	subjects := []Subject{airlock, raw, gvisor}
	return Report{
		Benchmark: "airlock bench create: test",
		StartedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		Runs:      2,
		Warmup:    1,
		Seed:      42,
		Order:     "random per round (seed 42)",
		Template:  "sha256:abc",
		Host: HostFacts{CPUs: 2, Kernel: "6.1.0", OS: "Debian GNU/Linux 12 (bookworm)", Cgroups: "hybrid",
			GoVersion: "go1.26.8", Versions: map[string]string{"runsc": "release-1", "runc": "1.1.5"}},
		Subjects: subjects,
		Ratios:   ratios(subjects),
		Skipped:  []Skipped{{Name: "podman", Reason: "not installed"}},
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	rows := map[string]string{
		"airlock-runc": `^airlock-runc\s+shared-kernel\s+2\s+100\.0ms\s+109\.0ms\s+109\.8ms\s+90\.0ms\s+110\.0ms\s+100\.0ms\s+4\.00× runc run$`,
		"runc run":     `^runc run\s+shared-kernel\s+2\s+25\.0ms\s+29\.5ms\s+29\.9ms\s+20\.0ms\s+30\.0ms\s+25\.0ms\s+-$`,
		"runsc run":    `^runsc run\s+user-space-kernel\s+2\s+130\.0ms\s+139\.0ms\s+139\.8ms\s+120\.0ms\s+140\.0ms\s+130\.0ms\s+-$`,
		"header":       `^SUBJECT\s+ISOLATION\s+N\s+P50\s+P95\s+P99\s+MIN\s+MAX\s+MEAN\s+P50 RATIO$`,
		"phase header": `^SUBJECT\s+CREATE\s+COMMAND SESSION\s+FIRST OUTPUT$`,
		"phase row":    `^airlock-runc\s+87\.5ms / 94\.2ms\s+2\.5ms / 3\.0ms\s+10\.0ms / 11\.8ms$`,
		"skipped":      `^podman: not installed, skipped$`,
		"host":         `^Host: 2 CPUs, Linux 6\.1\.0, Debian GNU/Linux 12 \(bookworm\), cgroups hybrid, runc 1\.1\.5, runsc release-1, go1\.26\.8$`,
		"order":        `^2 runs per subject after 1 warm-up runs; random per round \(seed 42\)$`,
		"method":       "^  runc run: fork/exec of `runc run`; overlay before the clock$",
	}
	for name, re := range rows {
		if !regexp.MustCompile("(?m)" + re).MatchString(out) {
			t.Errorf("%s: no line matches %s", name, re)
		}
	}
	// The table comes before the phases, the phases before the host line.
	if i, j, k := strings.Index(out, "P50 RATIO"), strings.Index(out, "COMMAND SESSION"), strings.Index(out, "Host:"); i > j || j > k {
		t.Errorf("sections out of order: %d %d %d", i, j, k)
	}
}

func TestWriteTableWithoutPhasesOrRatios(t *testing.T) {
	r := sampleReport()
	r.Subjects = r.Subjects[1:2]
	r.Ratios = nil
	r.Skipped = nil
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "phases") || strings.Contains(buf.String(), "skipped") {
		t.Errorf("unexpected sections:\n%s", buf.String())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTableReportsWriteErrors(t *testing.T) {
	if err := sampleReport().WriteTable(failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteTable to a failing writer = %v, want its error", err)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs     int `json:"runs"`
		Seed     uint64
		Host     HostFacts `json:"host"`
		Subjects []struct {
			Name        string          `json:"name"`
			Kind        string          `json:"kind"`
			Isolation   string          `json:"isolation"`
			FirstOutput json.RawMessage `json:"first_output"`
			Phases      []struct {
				Name  string `json:"name"`
				Stats Stats  `json:"stats"`
			} `json:"phases"`
			SamplesMs []float64 `json:"samples_ms"`
		} `json:"subjects"`
		Ratios  []Ratio   `json:"ratios"`
		Skipped []Skipped `json:"skipped"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if got.Runs != 2 || got.Seed != 42 || got.Host.Versions["runc"] != "1.1.5" {
		t.Errorf("header fields wrong: %+v", got)
	}
	if len(got.Subjects) != 3 {
		t.Fatalf("subjects = %+v", got.Subjects)
	}
	a := got.Subjects[0]
	var first Stats
	if err := json.Unmarshal(a.FirstOutput, &first); err != nil {
		t.Fatal(err)
	}
	if a.Name != "airlock-runc" || a.Kind != KindAirlock || a.Isolation != "shared-kernel" ||
		first.P50 != ms(100) || len(a.Phases) != 3 || a.Phases[1].Stats.P50 != ms(2.5) {
		t.Errorf("airlock subject = %+v (first output %+v)", a, first)
	}
	if len(a.SamplesMs) != 2 || a.SamplesMs[0] != 90 || a.SamplesMs[1] != 110 {
		t.Errorf("samples_ms = %v", a.SamplesMs)
	}
	if !regexp.MustCompile(`"p95_ms":\s*109\b`).Match(a.FirstOutput) {
		t.Errorf("first_output = %s", a.FirstOutput)
	}
	if len(got.Ratios) != 1 || got.Ratios[0].P50 != 4 || got.Ratios[0].Peer != "runc run" {
		t.Errorf("ratios = %+v", got.Ratios)
	}
	if len(got.Skipped) != 1 || got.Skipped[0].Name != "podman" {
		t.Errorf("skipped = %+v", got.Skipped)
	}
}

func TestConfigCheck(t *testing.T) {
	agent := t.TempDir() + "/airlock-agent"
	if err := writeFile(agent); err != nil {
		t.Fatal(err)
	}
	base := DefaultConfig()
	base.AgentBinary = agent
	tests := []struct {
		name   string
		modify func(*Config)
		want   string // substring of the error; "" for none
	}{
		{"defaults", func(*Config) {}, ""},
		{"no runs", func(c *Config) { c.Runs = 0 }, "runs must be at least 1"},
		{"negative warmup", func(c *Config) { c.Warmup = -1 }, "warmup must not be negative"},
		{"no runtimes", func(c *Config) { c.Runtimes = nil }, "at least one runtime"},
		{"unknown runtime", func(c *Config) { c.Runtimes = []string{"kata"} }, `unknown OCI runtime "kata"`},
		{"duplicate runtime", func(c *Config) { c.Runtimes = []string{"runc", "runc"} }, "runtime runc given twice"},
		{"unknown peer", func(c *Config) { c.Peers = []string{"docker"} }, `unknown peer "docker"`},
		{"duplicate peer", func(c *Config) { c.Peers = []string{"runc", "runc"} }, "peer runc given twice"},
		{"no peers is fine", func(c *Config) { c.Peers = nil }, ""},
		{"no agent", func(c *Config) { c.AgentBinary = "" }, "airlock-agent binary is required"},
		{"missing agent", func(c *Config) { c.AgentBinary = agent + ".missing" }, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Runtimes = append([]string(nil), base.Runtimes...)
			c.Peers = append([]string(nil), base.Peers...)
			tt.modify(&c)
			err := c.check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func writeFile(path string) error { return os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755) }

func TestCheckSource(t *testing.T) {
	tests := []struct {
		got, want string
		ok        bool
	}{
		{"pool", "pool", true},
		{"cold", "pool", false},
		{"", "pool", false},
		{"snapshot", "pool", false},
		{"cold", "cold", true},
		{"", "cold", true}, // a server without pools reports no source
		{"pool", "cold", false},
		{"snapshot", "cold", false},
	}
	for _, tt := range tests {
		err := checkSource(tt.got, tt.want)
		if (err == nil) != tt.ok {
			t.Errorf("checkSource(%q, %q) = %v, want ok %v", tt.got, tt.want, err, tt.ok)
		}
	}
}

func TestPoolTargetsInTable(t *testing.T) {
	r := sampleReport()
	pool := summarizeSubject(Subject{
		Name: "airlock-runc-pool", Kind: KindAirlock, Runtime: "runc", Source: "pool", Isolation: environment.IsolationSharedKernel,
	}, []sample{{total: ms(8), phases: []time.Duration{ms(2), ms(2), ms(4)}}, {total: ms(12), phases: []time.Duration{ms(3), ms(3), ms(6)}}}, airlockPhases)
	slow := summarizeSubject(Subject{Name: "airlock-runsc-pool", Kind: KindAirlock, Runtime: "runsc", Source: "pool"},
		[]sample{{total: ms(30)}}, airlockPhases)
	crun := summarizeSubject(Subject{Name: "airlock-crun-pool", Kind: KindAirlock, Runtime: "crun", Source: "pool"},
		[]sample{{total: ms(30)}}, airlockPhases)
	for _, s := range []Subject{pool, slow, crun} {
		if tg, ok := poolTarget(s); ok {
			r.Targets = append(r.Targets, tg)
		}
	}
	want := []Target{
		{Name: "airlock-runc-pool claim → first output p50", Want: "≤ 10.0ms", Got: "10.0ms", Met: true},
		{Name: "airlock-runsc-pool claim → first output p50", Want: "≤ 20.0ms", Got: "30.0ms", Met: false},
	}
	if len(r.Targets) != len(want) || r.Targets[0] != want[0] || r.Targets[1] != want[1] {
		t.Fatalf("targets = %+v, want %+v", r.Targets, want)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"  airlock-runc-pool claim → first output p50: 10.0ms, want ≤ 10.0ms: met\n",
		"  airlock-runsc-pool claim → first output p50: 30.0ms, want ≤ 20.0ms: MISSED\n",
	} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, buf.String())
		}
	}
}
