package dataplane

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
)

// TestMetricsOfStreams: stdin and an SSE attach through the data plane
// count their payload bytes by direction, and no stream stays counted open
// once they ended.
func TestMetricsOfStreams(t *testing.T) {
	f := newFixture(t)
	m := metrics.New()
	f.dp.cfg.Metrics = m // before any request
	pid, tok := f.sessionSpec(model.ProcessSpec{Args: []string{"cat"}, Stdin: true})
	in := bytes.Repeat([]byte("metrics!"), 1000)
	if resp := f.post(apiv1.ProcessDataPath(pid.String(), "stdin")+"?close=1", tok, "application/octet-stream", bytes.NewReader(in)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("stdin: status %d", resp.StatusCode)
	}
	out, exit := output(t, readEvents(t, f.get(f.attachURL(pid.String()), "Bearer "+tok, nil).Body, nil))
	if out != string(in) || exit.ExitCode != 0 {
		t.Fatalf("cat printed %d bytes, exit %+v", len(out), exit)
	}
	got := nonZero(t, m)
	for _, want := range []string{
		`airlock_dataplane_bytes_total{direction="in",kind="stdin"} 8000`,
		`airlock_dataplane_bytes_total{direction="out",kind="attach_sse"} 8000`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("no %s in\n%s", want, got)
		}
	}
	if strings.Contains(got, "airlock_dataplane_streams_open{") {
		t.Fatalf("streams still counted open after they ended: %s", got)
	}
}

// nonZero returns the data plane's samples that are not 0, one a line.
func nonZero(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, fam := range fams {
		if !strings.HasPrefix(fam.GetName(), "airlock_dataplane_") {
			continue
		}
		for _, mt := range fam.GetMetric() {
			v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
			if v == 0 {
				continue
			}
			b.WriteString(fam.GetName() + "{")
			for i, l := range mt.GetLabel() {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
			}
			b.WriteString("} " + strconv.FormatFloat(v, 'f', -1, 64) + "\n")
		}
	}
	return b.String()
}
