package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func (f *fakeServer) quotaOut(r *http.Request) apiv1.ProjectQuota {
	return apiv1.ProjectQuota{ProjectID: r.PathValue("id"), Limits: f.quota,
		Usage: apiv1.QuotaUsage{Sandboxes: 2, CPUs: 3, MemoryMiB: 1024, DiskMiB: 20480}}
}

func (f *fakeServer) getQuota(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, 200, f.quotaOut(r))
}

func (f *fakeServer) putQuota(w http.ResponseWriter, r *http.Request) {
	var in apiv1.QuotaLimits
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = in
	f.quotaPuts = append(f.quotaPuts, in)
	writeJSON(w, 200, f.quotaOut(r))
}

func TestProjectQuotaCommand(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	prj := model.NewProjectID().String()

	code, stdout, stderr := runCLI(ctx, f, "admin", "project", "quota", prj)
	if code != 0 || !strings.Contains(squash(stdout), "sandboxes 2 unlimited\ncpus 3 unlimited\nmemory_mib 1024 unlimited\ndisk_mib 20480 unlimited\n") ||
		len(f.quotaPuts) != 0 {
		t.Fatalf("show: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(ctx, f, "admin", "project", "quota", prj, "--sandboxes", "5", "--disk-mib", "40960")
	if code != 0 || !strings.Contains(squash(stdout), "sandboxes 2 5\n") || !strings.Contains(squash(stdout), "disk_mib 20480 40960\n") {
		t.Fatalf("set: %d\n%s\n%s", code, stdout, stderr)
	}
	// Only the limits given change; "unlimited" removes one.
	code, _, stderr = runCLI(ctx, f, "admin", "project", "quota", prj, "--cpus", "8", "--sandboxes", "unlimited")
	if code != 0 {
		t.Fatalf("second set: %d %s", code, stderr)
	}
	if q := f.quota; q.Sandboxes != nil || q.CPUs == nil || *q.CPUs != 8 || q.MemoryMiB != nil || q.DiskMiB == nil || *q.DiskMiB != 40960 {
		t.Fatalf("merged quota %+v", q)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "admin", "project", "quota", prj, "--clear")
	var out apiv1.ProjectQuota
	if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || out.Limits != (apiv1.QuotaLimits{}) || len(f.quotaPuts) != 3 {
		t.Fatalf("clear: %d %s", code, stdout)
	}
	for _, args := range [][]string{
		{prj, "--clear", "--cpus", "1"},
		{prj, "--cpus", "-1"},
		{prj, "--cpus", "many"},
		{"not-a-project"},
		{},
	} {
		code, _, stderr := runCLI(ctx, f, append([]string{"admin", "project", "quota"}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, %s; want a usage error", args, code, stderr)
		}
	}
	if len(f.quotaPuts) != 3 {
		t.Fatal("a usage error reached the server")
	}
}
