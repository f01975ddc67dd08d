package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestMetrics: the real server serves its metrics on the main listener to
// an admin key only, and without a key on --metrics-listen; a create, a
// command and a delete on runc move the create histogram, the operations
// counter, the sandboxes gauge and the data plane's bytes on both.
func TestMetrics(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	metricsAddr := freeLoopbackAddr(t)
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{"--metrics-listen", metricsAddr}})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	hc := s.httpClient()
	private := "http://" + metricsAddr + "/metrics"

	// The main listener: an admin key, nothing less.
	if code, _ := scrapeURL(ctx, t, hc, s.url+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a key: %d, want 401", code)
	}
	c := s.client()
	member := newMemberKey(ctx, t, s)
	if code, _ := scrapeURL(ctx, t, hc, s.url+"/metrics", member); code != http.StatusForbidden {
		t.Fatalf("GET /metrics with a member key: %d, want 403", code)
	}
	before := mustScrape(ctx, t, hc, s.url+"/metrics", s.key)
	if _, ok := before["airlock_store_scrape_success"]; !ok {
		t.Fatalf("no airlock_store_scrape_success in %v", before)
	}
	privBefore := mustScrape(ctx, t, hc, private, "")

	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)
	if res := execIn(ctx, t, c, id, "echo", "hello metrics"); res.stdout != "hello metrics\n" {
		t.Fatalf("echo: %+v", res)
	}
	running := mustScrape(ctx, t, hc, private, "")
	if n := running[`airlock_sandboxes{environment="runc",state="running"}`]; n != 1 {
		t.Errorf("running runc sandboxes = %v, want 1", n)
	}
	op, err := c.DeleteSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := c.WaitOperation(ctx, model.OperationID(op.Operation.ID)); err != nil || done.State != string(model.OpSucceeded) {
		t.Fatalf("delete: %+v, %v", done, err)
	}

	// The controller counts an operation just after the store recorded its
	// outcome (what WaitOperation saw): give the count a moment.
	const deleted = `airlock_operations_finished_total{kind="delete",outcome="succeeded"}`
	var after, privAfter map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = mustScrape(ctx, t, hc, s.url+"/metrics", s.key)
		privAfter = mustScrape(ctx, t, hc, private, "")
		if after[deleted] > before[deleted] && privAfter[deleted] > privBefore[deleted] || time.Now().After(deadline) {
			break
		}
	}
	for _, pair := range []struct {
		name          string
		before, after map[string]float64
	}{{"main listener", before, after}, {"--metrics-listen", privBefore, privAfter}} {
		moved := func(series string) float64 { return pair.after[series] - pair.before[series] }
		for series, want := range map[string]float64{
			`airlock_sandbox_create_seconds_count{environment="runc",source="cold"}`: 1,
			`airlock_operations_finished_total{kind="create",outcome="succeeded"}`:   1,
			`airlock_operations_finished_total{kind="delete",outcome="succeeded"}`:   1,
		} {
			if got := moved(series); got != want {
				t.Errorf("%s: %s moved by %v, want %v", pair.name, series, got, want)
			}
		}
		if got := moved(`airlock_dataplane_bytes_total{direction="out",kind="attach_sse"}`) + moved(`airlock_dataplane_bytes_total{direction="out",kind="attach_websocket"}`); got < float64(len("hello metrics\n")) {
			t.Errorf("%s: data plane output bytes moved by %v", pair.name, got)
		}
		if n := pair.after[`airlock_sandboxes{environment="runc",state="running"}`]; n != 0 {
			t.Errorf("%s: running sandboxes after the delete = %v", pair.name, n)
		}
	}
	if t.Failed() {
		_, body := scrapeURL(ctx, t, hc, private, "")
		t.Logf("metrics after:\n%s", body)
	}
}

// freeLoopbackAddr returns 127.0.0.1 and a port nothing listens on now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// newMemberKey makes a project with a member key and returns the key.
func newMemberKey(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	var p apiv1.Project
	if code, err := s.apiJSON(ctx, "POST", "/v1/admin/projects", map[string]string{"name": "metrics-member"}, &p); err != nil || code != http.StatusCreated {
		t.Fatalf("create project: %d %v", code, err)
	}
	var k apiv1.APIKey
	if code, err := s.apiJSON(ctx, "POST", "/v1/admin/keys", map[string]string{"project_id": p.ID, "role": "member", "name": "m"}, &k); err != nil || code != http.StatusCreated {
		t.Fatalf("create key: %d %v", code, err)
	}
	return k.Token
}

func scrapeURL(ctx context.Context, t *testing.T, hc *http.Client, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// mustScrape reads url's metrics: every sample's value by its series.
func mustScrape(ctx context.Context, t *testing.T, hc *http.Client, url, key string) map[string]float64 {
	t.Helper()
	code, body := scrapeURL(ctx, t, hc, url, key)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatal(fmt.Errorf("sample %q: %w", line, err))
		}
		out[line[:i]] = v
	}
	return out
}
