package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestGetAndDeleteCommands drives the one-argument get and delete commands
// of volumes and snapshots: the parsed argument goes into the path, the
// answer is printed, a bad argument is a usage error with no request.
func TestGetAndDeleteCommands(t *testing.T) {
	vol := apiv1.Volume{ID: model.NewVolumeID().String(), Name: "data", SizeMiB: 64, CreatedAt: fixedTime}
	snap := apiv1.SavedSnapshot{ID: model.NewSnapshotID().String(), State: "ready", SourceSandboxID: model.NewSandboxID().String(), CreatedAt: fixedTime}
	var (
		mu       sync.Mutex
		requests []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/volumes/"):
			writeJSON(w, 200, vol)
		case r.URL.Path == "/v1/snapshots/"+snap.ID:
			writeJSON(w, 200, snap)
		default:
			writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
		}
	}))
	defer srv.Close()
	f := &fakeServer{t: t, srv: srv}
	ctx := context.Background()
	for _, tc := range []struct {
		args    []string
		request string // "" : none, a usage error
		out     string
	}{
		{[]string{"volume", "get", "data"}, "GET /v1/volumes/data", "Name:     data"},
		{[]string{"volume", "get", vol.ID}, "GET /v1/volumes/" + vol.ID, vol.ID},
		{[]string{"volume", "delete", "data"}, "DELETE /v1/volumes/data", vol.ID},
		{[]string{"volume", "get", "../x"}, "", ""},
		{[]string{"volume", "delete", "vol_short"}, "", ""},
		{[]string{"volume", "get"}, "", ""},
		{[]string{"snapshot", "get", snap.ID}, "GET /v1/snapshots/" + snap.ID, "State:     ready"},
		{[]string{"snapshot", "delete", snap.ID}, "DELETE /v1/snapshots/" + snap.ID, snap.ID},
		{[]string{"snapshot", "get", vol.ID}, "", ""},
	} {
		requests = nil
		code, stdout, stderr := runCLI(ctx, f, tc.args...)
		if tc.request == "" {
			if code != 2 || len(requests) != 0 {
				t.Errorf("%v: exit %d (want 2, a usage error), requests %q; %s", tc.args, code, requests, stderr)
			}
			continue
		}
		if code != 0 || len(requests) != 1 || requests[0] != tc.request || !strings.Contains(stdout, tc.out) {
			t.Errorf("%v: exit %d, requests %q (want %q)\n%s%s", tc.args, code, requests, tc.request, stdout, stderr)
		}
	}
	if _, _, stderr := runCLI(ctx, f, "volume", "get", "a/b"); !strings.Contains(stderr, "VOLUME: ") {
		t.Errorf("volume get a/b: %q, want the argument named", stderr)
	}
}
