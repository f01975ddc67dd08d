package bench

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func TestBurstDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   BurstOptions
		ok   bool
	}{
		{"zero takes defaults", BurstOptions{}, true},
		{"bad runtime", BurstOptions{Runtime: "kata"}, false},
		{"negative size", BurstOptions{Size: -1}, false},
		{"degrade 1", BurstOptions{Degrade: 1}, false},
		{"zero-client step", BurstOptions{Steps: []int{1, 0}}, false},
		{"negative fill", BurstOptions{FillParallel: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.in
			err := o.defaults()
			if (err == nil) != tt.ok {
				t.Fatalf("defaults() = %v, want ok %v", err, tt.ok)
			}
			if tt.ok && (o.Runtime != "runc" || o.Size != 200 || o.Clients != 20 || o.MemoryMiB != 32 ||
				o.Degrade != 2 || o.StepCreates != 40 || len(o.Steps) != 6) {
				t.Errorf("defaults = %+v", o)
			}
		})
	}
}

func TestSummarizeBurst(t *testing.T) {
	rs := []createResult{
		{id: "sbx_a", source: apiv1.SourcePool, latency: ms(4)},
		{id: "sbx_b", source: apiv1.SourcePool, latency: ms(6)},
		{id: "sbx_c", source: apiv1.SourceCold, latency: ms(300)},
		{id: "sbx_d", source: "", latency: ms(200)}, // no source: counted as a miss
	}
	got := summarizeBurst(rs, 2*time.Second, 3, 5)
	if got.Creates != 4 || got.Hits != 2 || got.Misses != 2 || got.Clients != 3 || got.ReadyAtEnd != 5 {
		t.Errorf("counts = %+v", got)
	}
	if got.Rate.PerSecond != 2 || got.Rate.Seconds != 2 {
		t.Errorf("rate = %+v, want 2/s over 2 s", got.Rate)
	}
	if got.HitLatency.N != 2 || got.HitLatency.Max != ms(6) || got.Latency.Max != ms(300) || got.Latency.N != 4 {
		t.Errorf("latencies: all %+v, hits %+v", got.Latency, got.HitLatency)
	}
	if r := rateOf(3, 0); r.PerSecond != 0 {
		t.Errorf("rate over no time = %+v", r)
	}
}

func sampleBurstReport() BurstReport {
	rep := BurstReport{
		Benchmark: "airlock bench burst: test", Runtime: "runc", Template: "sha256:abc", MemoryMiB: 128, Degrade: 2,
		Fill:   rateOf(200, 4*time.Second),
		Burst:  summarizeBurst([]createResult{{source: "pool", latency: ms(10)}, {source: "pool", latency: ms(20)}}, 10*time.Millisecond, 2, 0),
		Refill: rateOf(2, 500*time.Millisecond),
		Sustained: []SustainedStep{
			{Clients: 1, Creates: 10, Rate: rateOf(10, 2*time.Second), Latency: Stats{N: 10, P50: ms(190), P95: ms(210), P99: ms(220), Max: ms(220)}},
			{Clients: 2, Creates: 10, Rate: rateOf(10, time.Second), Latency: Stats{N: 10, P50: ms(200), P95: ms(300), P99: ms(310), Max: ms(310)}},
			{Clients: 4, Creates: 12, Rate: rateOf(12, time.Second), Latency: Stats{N: 12, P50: ms(350), P95: ms(500), P99: ms(510), Max: ms(510)}, Degraded: true},
		},
		SustainedBest: 10,
		Host:          HostFacts{CPUs: 2, Kernel: "6.1.0", Cgroups: "hybrid", GoVersion: "go1.26.8"},
	}
	rep.Targets = burstTargets(rep)
	return rep
}

func TestBurstTargets(t *testing.T) {
	rep := sampleBurstReport()
	if len(rep.Targets) != 1 || !rep.Targets[0].Met {
		t.Fatalf("targets = %+v (200/s, all hits: met)", rep.Targets)
	}
	rep.Burst.Misses = 1
	if tg := burstTargets(rep); tg[0].Met {
		t.Errorf("a burst with a cold create met the target: %+v", tg)
	}
	rep.Burst.Misses, rep.Burst.Rate.PerSecond = 0, 199
	if tg := burstTargets(rep); tg[0].Met {
		t.Errorf("199/s met the target: %+v", tg)
	}
	rep.Runtime = "runsc"
	if tg := burstTargets(rep); len(tg) != 0 {
		t.Errorf("runsc has no burst target: %+v", tg)
	}
}

func TestBurstWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleBurstReport().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	for name, re := range map[string]string{
		"fill":      `^pool fill \(PUT /v1/pools → all ready\)\s+200\s+4000\.0ms\s+50\.0/s\s+-`,
		"burst":     `^burst from the full pool, 2 clients\s+2 \(2 pool, 0 cold\)\s+10\.0ms\s+200\.0/s\s+15\.0ms\s+19\.5ms\s+19\.9ms\s+20\.0ms$`,
		"refill":    `^refill after the burst \(0 ready at its end\)\s+2\s+500\.0ms\s+4\.0/s`,
		"step 1":    `^1\s+10\s+2000\.0ms\s+5\.0/s\s+190\.0ms\s+210\.0ms\s+220\.0ms\s+220\.0ms\s+no$`,
		"step 4":    `^4\s+12\s+1000\.0ms\s+12\.0/s\s+350\.0ms\s+500\.0ms\s+510\.0ms\s+510\.0ms\s+yes$`,
		"best":      `^sustained cold creates: 10\.0/s at best before degrading; burst from the pool over it: 20\.00×$`,
		"target":    `^  burst of 2 creates from a full pool on runc: 200\.0/s, 2 of 2 from the pool, want ≥ 200/s \(CubeSandbox: 180\.9/s at 20 concurrent\): met$`,
		"host line": `^Host: 2 CPUs`,
	} {
		if !regexp.MustCompile("(?m)" + re).MatchString(out) {
			t.Errorf("%s: no line matches %s", name, re)
		}
	}
	var js bytes.Buffer
	if err := sampleBurstReport().WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Burst struct {
			Hits int `json:"hits"`
			Rate struct {
				PerS float64 `json:"per_s"`
			} `json:"rate"`
		} `json:"burst"`
		Sustained []struct {
			Degraded bool `json:"degraded"`
		} `json:"sustained"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Burst.Hits != 2 || back.Burst.Rate.PerS != 200 || len(back.Sustained) != 3 || !back.Sustained[2].Degraded {
		t.Errorf("JSON = %s (%v)", js.String(), err)
	}
}
