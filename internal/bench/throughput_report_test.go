package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "4096", want: 4096},
		{in: "1GiB", want: 1 << 30},
		{in: "256MiB", want: 256 << 20},
		{in: "256M", want: 256 << 20},
		{in: "1.5GB", want: 1_500_000_000},
		{in: "10KB", want: 10_000},
		{in: "3 KiB", want: 3 << 10},
		{in: "7B", want: 7},
		{in: "", bad: true},
		{in: "GiB", bad: true},
		{in: "0", bad: true},
		{in: "-1MiB", bad: true},
		{in: "1XB", bad: true},
		{in: "NaN", bad: true},
		{in: "1e30", bad: true},
	} {
		got, err := ParseBytes(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseBytes(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestMBps(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		d    time.Duration
		want float64
	}{
		{n: 1e6, d: time.Second, want: 1},
		{n: 1 << 30, d: 2 * time.Second, want: 536.870912},
		{n: 300e6, d: 500 * time.Millisecond, want: 600},
		{n: 1, d: 0, want: 0},
		{n: 1, d: -time.Second, want: 0},
	} {
		if got := MBps(tc.n, tc.d); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("MBps(%d, %v) = %v, want %v", tc.n, tc.d, got, tc.want)
		}
	}
}

func TestNewThroughputRow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		times      []time.Duration
		peaks      []int64
		wantP50    float64
		wantWorst  float64
		wantBest   float64
		wantPeak   int64
		wantVerify bool
	}{
		{name: "three runs", times: []time.Duration{2 * time.Second, time.Second, 4 * time.Second}, peaks: []int64{10, 30, 20},
			wantP50: 500, wantWorst: 250, wantBest: 1000, wantPeak: 30, wantVerify: true},
		{name: "one run", times: []time.Duration{time.Second}, peaks: []int64{0},
			wantP50: 1000, wantWorst: 1000, wantBest: 1000, wantVerify: true},
		{name: "none", wantVerify: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newThroughputRow(ThroughputRow{Subject: "s", Direction: DirStdout}, 1e9, tc.times, tc.peaks)
			if r.MBps.P50 != tc.wantP50 || r.MBps.Worst != tc.wantWorst || r.MBps.Best != tc.wantBest {
				t.Errorf("rates = %+v", r.MBps)
			}
			if r.PeakRSSGrowth != tc.wantPeak || r.Verified != tc.wantVerify || r.Time.N != len(tc.times) {
				t.Errorf("row = %+v", r)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536 << 10, "1.5 MiB"}, {1 << 30, "1.0 GiB"}, {-2048, "-2.0 KiB"},
	} {
		if got := formatBytes(tc.n); got != tc.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestStatusKB(t *testing.T) {
	status := "Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t   1024 kB\nBad:\t12 MB\n"
	for _, tc := range []struct {
		field string
		want  int64
		bad   bool
	}{
		{field: "VmHWM", want: 20480 << 10},
		{field: "VmRSS", want: 1024 << 10},
		{field: "Bad", bad: true},
		{field: "VmPeak", bad: true},
	} {
		got, err := statusKB(status, tc.field)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("statusKB(%s) = %d, %v", tc.field, got, err)
		}
	}
}

func TestPayload(t *testing.T) {
	p := newPayload(3<<20 + 5)
	var buf bytes.Buffer
	if n, err := io.Copy(&buf, p.reader()); err != nil || n != p.n {
		t.Fatalf("reader gave %d bytes, %v", n, err)
	}
	hc := newHashCounter()
	hc.Write(buf.Bytes())
	if err := hc.check(p.n, p.sum); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes()[:1<<20], buf.Bytes()[1<<20:2<<20]) {
		t.Error("the pattern does not repeat its block")
	}
	if err := newHashCounter().check(p.n, p.sum); err == nil {
		t.Error("an empty stream passed the check")
	}
}

func TestThroughputReportOutput(t *testing.T) {
	rep := ThroughputReport{
		Benchmark: "airlock bench throughput: test", Bytes: 1 << 30, Runs: 2, Memory: "peak RSS",
		Rows: []ThroughputRow{
			newThroughputRow(ThroughputRow{Subject: "airlock-runc", Kind: KindAirlock, Runtime: "runc", Direction: DirStdout, Method: "sse"},
				1<<30, []time.Duration{2 * time.Second, 3 * time.Second}, []int64{8 << 20, 4 << 20}),
		},
		Skipped: []Skipped{{Name: "raw file transfers", Reason: "no raw peer"}},
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.0 GiB per transfer", "airlock-runc", "stdout", "429", "8.0 MiB", "raw file transfers: no raw peer, skipped"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	row := back["rows"].([]any)[0].(map[string]any)
	if row["mb_per_s"].(map[string]any)["p50"].(float64) < 400 || row["time"].(map[string]any)["n"].(float64) != 2 {
		t.Errorf("row JSON = %v", row)
	}
}
