package bench

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestPercentile(t *testing.T) {
	oneToTwenty := make([]time.Duration, 20)
	for i := range oneToTwenty {
		oneToTwenty[i] = ms(float64(i + 1))
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", []time.Duration{ms(7)}, 0.95, ms(7)},
		{"median of odd count", []time.Duration{ms(1), ms(2), ms(9)}, 0.5, ms(2)},
		{"median of even count interpolates", []time.Duration{ms(1), ms(2), ms(4), ms(10)}, 0.5, ms(3)},
		{"p0 is the minimum", []time.Duration{ms(3), ms(5)}, 0, ms(3)},
		{"p100 is the maximum", []time.Duration{ms(3), ms(5)}, 1, ms(5)},
		// rank 0.95·19 = 18.05: 19ms + 0.05·(20ms − 19ms)
		{"p95 of 1..20", oneToTwenty, 0.95, ms(19.05)},
		{"p50 of 1..20", oneToTwenty, 0.5, ms(10.5)},
		{"p clamped below", []time.Duration{ms(3), ms(5)}, -1, ms(3)},
		{"p clamped above", []time.Duration{ms(3), ms(5)}, 2, ms(5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	in := []time.Duration{ms(30), ms(10), ms(20), ms(40), ms(1000)}
	orig := slices.Clone(in)
	got := Summarize(in)
	want := Stats{N: 5, P50: ms(30), P95: ms(808), P99: ms(961.6), Min: ms(10), Max: ms(1000), Mean: ms(220)}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("Summarize reordered its input: %v", in)
	}
	if got := Summarize(nil); got != (Stats{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", got)
	}
}

func TestRatioOf(t *testing.T) {
	tests := []struct {
		a, b time.Duration
		want float64
	}{
		{ms(90), ms(30), 3},
		{ms(30), ms(90), 1.0 / 3},
		{ms(30), 0, 0},
		{ms(30), -ms(1), 0},
	}
	for _, tt := range tests {
		if got := RatioOf(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("RatioOf(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRatios(t *testing.T) {
	subjects := []Subject{
		{Name: "airlock-runc", Kind: KindAirlock, Runtime: "runc", FirstOutput: Stats{N: 2, P50: ms(90), P95: ms(120)}},
		{Name: "airlock-crun", Kind: KindAirlock, Runtime: "crun", FirstOutput: Stats{N: 2, P50: ms(80)}},
		{Name: "runc run", Kind: KindRaw, Runtime: "runc", FirstOutput: Stats{N: 2, P50: ms(30), P95: ms(40)}},
		{Name: "podman run", Kind: KindRaw, Runtime: "podman", FirstOutput: Stats{N: 2, P50: ms(100)}},
	}
	got := ratios(subjects)
	want := []Ratio{{Airlock: "airlock-runc", Peer: "runc run", P50: 3, P95: 3}}
	if !slices.Equal(got, want) {
		t.Errorf("ratios = %+v, want %+v (airlock-crun has no crun peer)", got, want)
	}
}

func TestSummarizeSubjectPhases(t *testing.T) {
	samples := []sample{
		{total: ms(100), phases: []time.Duration{ms(80), ms(5), ms(15)}},
		{total: ms(200), phases: []time.Duration{ms(170), ms(10), ms(20)}},
	}
	s := summarizeSubject(Subject{Name: "airlock-runc", Kind: KindAirlock}, samples, airlockPhases)
	if s.FirstOutput.N != 2 || s.FirstOutput.P50 != ms(150) {
		t.Errorf("first output = %+v", s.FirstOutput)
	}
	if len(s.Phases) != len(airlockPhases) {
		t.Fatalf("phases = %+v", s.Phases)
	}
	if s.Phases[0].Stats.P50 != ms(125) || s.Phases[2].Stats.Max != ms(20) {
		t.Errorf("phases = %+v", s.Phases)
	}
	raw := summarizeSubject(Subject{Name: "runc run", Kind: KindRaw}, []sample{{total: ms(20)}}, nil)
	if len(raw.Phases) != 0 || !slices.Equal(raw.Samples, []time.Duration{ms(20)}) {
		t.Errorf("raw subject = %+v", raw)
	}
}

func TestStatsJSONRoundTrip(t *testing.T) {
	in := Stats{N: 3, P50: 12345678 * time.Nanosecond, P95: ms(20), P99: ms(25.5), Min: ms(1), Max: 2 * time.Second, Mean: ms(7.5)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]any
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	if wire["p50_ms"] != 12.346 || wire["max_ms"] != 2000.0 || wire["n"] != 3.0 {
		t.Errorf("wire form = %s", b)
	}
	var out Stats
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := in
	want.P50 = 12346 * time.Microsecond // microsecond precision on the wire
	if out != want {
		t.Errorf("round trip = %+v, want %+v", out, want)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{ms(12.34), "12.3ms"},
		{ms(0.04), "0.0ms"},
		{ms(9999), "9999.0ms"},
		{12500 * time.Millisecond, "12.50s"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func FuzzPercentile(f *testing.F) {
	f.Add(int64(1), int64(5), int64(3), 0.5)
	f.Add(int64(-7), int64(0), int64(1<<40), 0.95)
	f.Fuzz(func(t *testing.T, a, b, c int64, p float64) {
		if math.IsNaN(p) {
			t.Skip()
		}
		// Keep values where sums and differences cannot overflow.
		clamp := func(v int64) time.Duration { return time.Duration(v % (1 << 50)) }
		s := []time.Duration{clamp(a), clamp(b), clamp(c)}
		slices.Sort(s)
		got := Percentile(s, p)
		if got < s[0] || got > s[2] {
			t.Fatalf("Percentile(%v, %v) = %v outside [min, max]", s, p, got)
		}
		if p <= 0.5 && got > Percentile(s, 0.5) || p >= 0.5 && got < Percentile(s, 0.5) {
			t.Fatalf("Percentile(%v, %v) = %v is not monotonic around the median", s, p, got)
		}
		st := Summarize(s)
		if st.Min > st.P50 || st.P50 > st.P95 || st.P95 > st.Max || st.Mean < st.Min || st.Mean > st.Max {
			t.Fatalf("Summarize(%v) = %+v is not ordered", s, st)
		}
	})
}

func FuzzStatsUnmarshalJSON(f *testing.F) {
	f.Add([]byte(`{"n":2,"p50_ms":1.5,"p95_ms":2,"min_ms":1,"max_ms":2,"mean_ms":1.5}`))
	f.Add([]byte(`{"n":"x"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Stats
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal %+v: %v", s, err)
		}
		var s2 Stats
		if err := json.Unmarshal(again, &s2); err != nil {
			t.Fatalf("unmarshal our own %s: %v", again, err)
		}
	})
}

func FuzzParseOSRelease(f *testing.F) {
	f.Add("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n")
	f.Add("NAME=x\nPRETTY_NAME='Alpine'\n")
	f.Add("PRETTY_NAME=\"a\\nb\"")
	f.Fuzz(func(t *testing.T, content string) {
		got := parseOSRelease(content)
		for _, r := range got {
			if r < ' ' || r == 0x7f {
				t.Fatalf("parseOSRelease(%q) = %q contains a control character", content, got)
			}
		}
	})
}

func TestParseOSRelease(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n", "Debian GNU/Linux 12 (bookworm)"},
		{"PRETTY_NAME='Alpine Linux v3.20'", "Alpine Linux v3.20"},
		{"PRETTY_NAME=Plain", "Plain"},
		{"NAME=x\n", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := parseOSRelease(tt.in); got != tt.want {
			t.Errorf("parseOSRelease(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
