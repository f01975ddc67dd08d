package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
)

// TestE2BBuildSurvivesRestart: an E2B template build (templates as code)
// is the store's, not the memory of the server asked. A build is started,
// the server is killed (SIGKILL) while the build's run step runs and
// started again on the same data: the build's status answers at once
// (before: 404 "build not found") and the build ends (ready, its tags
// pointed; never left building). A project's member key is refused with
// E2B's 403 naming why, and another project's admin cannot see the build.
func TestE2BBuildSurvivesRestart(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 8*time.Minute)
	httpc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(httpc.CloseIdleConnections)
	e := e2bCaller{t: t, ctx: ctx, base: s.url, key: s.key, http: httpc}

	// Keys of another project: a member and an admin.
	native := s.client()
	prj, err := native.CreateProject(ctx, "e2b-builds-other")
	if err != nil {
		t.Fatal(err)
	}
	member, err := native.CreateAPIKey(ctx, apiv1.CreateAPIKeyRequest{ProjectID: prj.ID, Role: "member", Format: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	otherAdmin, err := native.CreateAPIKey(ctx, apiv1.CreateAPIKeyRequest{ProjectID: prj.ID, Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	e.fails("POST", "/v3/templates", member.Token, map[string]any{"name": "members-tpl"}, 403, "admin API key")
	e.fails("POST", "/templates/tags", member.Token, map[string]any{"target": "base", "tags": []string{"evil"}}, 403, "admin API key")

	var rb struct {
		TemplateID, BuildID string
	}
	e.ok("POST", "/v3/templates", map[string]any{"name": "restart-tpl:v1", "tags": []string{"later"}}, 202, &rb)
	// The run step sleeps long enough to be killed in.
	e.ok("POST", "/v2/templates/restart-tpl/builds/"+rb.BuildID, map[string]any{
		"fromTemplate": "base",
		"steps":        []map[string]any{{"type": "RUN", "args": []string{"echo step-started; sleep 12; echo step-done > /built"}}},
	}, 202, nil)
	status := "/templates/restart-tpl/builds/" + rb.BuildID + "/status"
	type buildStatus struct {
		Status string   `json:"status"`
		Logs   []string `json:"logs"`
		Reason *struct {
			Message string `json:"message"`
		} `json:"reason"`
	}
	get := func(key string) (int, buildStatus) {
		rep := e.call("GET", status, key, nil)
		var st buildStatus
		if rep.status == 200 {
			if err := json.Unmarshal(rep.body, &st); err != nil {
				t.Fatalf("status: %v: %s", err, rep.body)
			}
		}
		return rep.status, st
	}
	// Wait for the run step to start, then kill the server under it.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, st := get(s.key)
		if code != 200 {
			t.Fatalf("status: HTTP %d", code)
		}
		if st.Status == "building" && strings.Contains(strings.Join(st.Logs, "\n"), "step-started") {
			break
		}
		if st.Status == "ready" || st.Status == "error" || time.Now().After(deadline) {
			t.Fatalf("the build did not reach its run step: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _ := get(otherAdmin.Token); code != 404 {
		t.Errorf("another project's admin reads the build: HTTP %d, want 404", code)
	}
	s.kill()
	s.start()
	e.base, native = s.url, s.client() // a new port
	if code, st := get(s.key); code != 200 || st.Status == "ready" {
		t.Fatalf("status right after the restart: HTTP %d %+v", code, st)
	}
	deadline = time.Now().Add(4 * time.Minute)
	var st buildStatus
	for {
		var code int
		code, st = get(s.key)
		if code != 200 {
			t.Fatalf("status after the restart: HTTP %d", code)
		}
		if st.Status == "ready" || st.Status == "error" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build stayed %s after the restart: %q", st.Status, st.Logs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after the restart the build ended %s; log: %q", st.Status, st.Logs)
	if st.Status != "ready" {
		t.Fatalf("the interrupted build (run again by the native build runner) ended %s: %+v", st.Status, st.Reason)
	}
	for _, ref := range []string{"restart-tpl:v1", "restart-tpl:later"} {
		if _, err := native.GetTemplate(ctx, ref); err != nil {
			t.Errorf("template %s: %v", ref, err)
		}
	}
	for _, ref := range []string{"restart-tpl:later", "restart-tpl:v1"} {
		if _, err := native.DeleteTemplate(ctx, ref); err != nil {
			t.Errorf("delete %s: %v", ref, err)
		}
	}
}
