package api

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/volumefs"
)

// fakeVolumeHost records the volumes whose files the API removed and
// keeps their content in directories below base (none without one).
type fakeVolumeHost struct {
	mu      sync.Mutex
	removed []model.VolumeID
	base    string
	opened  map[model.VolumeID]int // Content calls not released
}

func (f *fakeVolumeHost) Remove(_ context.Context, id model.VolumeID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeVolumeHost) Usage(model.VolumeID) (int64, int64, bool, error) {
	return 4096, 1 << 20, true, nil
}

func (f *fakeVolumeHost) Content(_ context.Context, id model.VolumeID, _ int) (*volumefs.Root, func(), error) {
	if f.base == "" {
		return nil, nil, errors.New("this fake keeps no content")
	}
	data, staging := filepath.Join(f.base, id.String(), "data"), filepath.Join(f.base, id.String(), "staging")
	for _, d := range []string{data, staging} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, err
		}
	}
	root, err := volumefs.Open(data, staging)
	if err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	if f.opened == nil {
		f.opened = map[model.VolumeID]int{}
	}
	f.opened[id]++
	f.mu.Unlock()
	return root, func() {
		root.Close()
		f.mu.Lock()
		f.opened[id]--
		f.mu.Unlock()
	}, nil
}

func withVolumes(h VolumeHost, quotaMiB int64) envOption {
	return func(c *envConfig) { c.Volumes, c.VolumeQuotaMiB = h, quotaMiB }
}

func TestVolumeCRUD(t *testing.T) {
	host := &fakeVolumeHost{}
	e := newEnv(t, withVolumes(host, 0))
	var v apiv1.Volume
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "data", "size_mib": 64}`).want(t, http.StatusCreated).decode(t, &v)
	if _, err := model.ParseVolumeID(v.ID); err != nil || v.Name != "data" || v.SizeMiB != 64 || v.NodeID != "" {
		t.Fatalf("created %+v (%v)", v, err)
	}
	for _, ref := range []string{v.ID, "data"} {
		var got apiv1.Volume
		e.do("GET", "/v1/volumes/"+ref, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
		if got.ID != v.ID {
			t.Fatalf("GET %s = %+v", ref, got)
		}
	}
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "data", "size_mib": 16}`).wantError(t, http.StatusConflict, apiv1.CodeAlreadyExists)
	var list apiv1.VolumeList
	e.do("GET", "/v1/volumes", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Volumes) != 1 || list.Volumes[0].ID != v.ID {
		t.Fatalf("list = %+v", list)
	}
	e.do("DELETE", "/v1/volumes/data", e.keyA, "").want(t, http.StatusOK)
	e.do("GET", "/v1/volumes/"+v.ID, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("DELETE", "/v1/volumes/"+v.ID, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	if len(host.removed) != 1 || host.removed[0] != model.VolumeID(v.ID) {
		t.Fatalf("removed files of %v, want [%s]", host.removed, v.ID)
	}
}

// TestVolumeBadInput: every malformed request is a 400 (or 413) that
// writes nothing.
func TestVolumeBadInput(t *testing.T) {
	e := newEnv(t, withVolumes(&fakeVolumeHost{}, 0))
	before := e.dump()
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
		invalid            bool // the OpenAPI document refuses it too
	}{
		{"POST", "/v1/volumes", `{"name": "../etc", "size_mib": 64}`, 400, apiv1.CodeInvalidRequest, true},
		{"POST", "/v1/volumes", `{"name": "vol_x", "size_mib": 64}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/volumes", `{"name": "", "size_mib": 64}`, 400, apiv1.CodeInvalidRequest, true},
		{"POST", "/v1/volumes", `{"name": "a", "size_mib": 1}`, 400, apiv1.CodeInvalidRequest, true},
		{"POST", "/v1/volumes", `{"name": "a", "size_mib": 99999999999}`, 400, apiv1.CodeInvalidRequest, true},
		{"POST", "/v1/volumes", `{"name": "a", "size_mib": 64, "extra": 1}`, 400, apiv1.CodeInvalidRequest, true},
		{"POST", "/v1/volumes", `{"name": "` + strings.Repeat("a", 2<<20) + `", "size_mib": 64}`, 413, apiv1.CodePayloadTooLarge, true},
		{"GET", "/v1/volumes/a%2Fb", "", 400, apiv1.CodeInvalidRequest, false},
		{"GET", "/v1/volumes/vol_short", "", 400, apiv1.CodeInvalidRequest, false},
		{"DELETE", "/v1/volumes/-x", "", 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "data", "path": "/proc"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "data", "path": "/"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "data", "path": "/data/../dev"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "data", "path": "/.airlock/run"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "data", "path": "data"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "../x", "path": "/data"}]}`, 400, apiv1.CodeInvalidRequest, false},
		{"POST", "/v1/sandboxes", `{"volume_mounts": [{"volume": "missing", "path": "/data"}]}`, 404, apiv1.CodeVolumeNotFound, false},
	} {
		e.send(req{method: tc.method, path: tc.path, key: e.keyA, body: tc.body, invalid: tc.invalid}).wantError(t, tc.status, tc.code)
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore %s\nafter %s", before, after)
	}
}

// TestVolumeOtherProject: another project's volume does not exist for a
// project: not listed, not read, not deleted, not mounted.
func TestVolumeOtherProject(t *testing.T) {
	e := newEnv(t, withVolumes(&fakeVolumeHost{}, 0))
	var v apiv1.Volume
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "secret-data", "size_mib": 64}`).want(t, http.StatusCreated).decode(t, &v)
	before := e.dump()
	e.do("GET", "/v1/volumes/"+v.ID, e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("GET", "/v1/volumes/secret-data", e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("DELETE", "/v1/volumes/"+v.ID, e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	e.do("POST", "/v1/sandboxes", e.keyB, `{"volume_mounts": [{"volume": "`+v.ID+`", "path": "/data"}]}`).
		wantError(t, http.StatusNotFound, apiv1.CodeVolumeNotFound)
	var list apiv1.VolumeList
	e.do("GET", "/v1/volumes", e.keyB, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Volumes) != 0 {
		t.Fatalf("project B lists %+v", list)
	}
	if after := e.dump(); after != before {
		t.Fatalf("another project's requests changed the store:\nbefore %s\nafter %s", before, after)
	}
	// B may have a volume of the same name: names are per project.
	e.do("POST", "/v1/volumes", e.keyB, `{"name": "secret-data", "size_mib": 16}`).want(t, http.StatusCreated)
}

func TestVolumeQuota(t *testing.T) {
	e := newEnv(t, withVolumes(&fakeVolumeHost{}, 100))
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "a", "size_mib": 64}`).want(t, http.StatusCreated)
	r := e.do("POST", "/v1/volumes", e.keyA, `{"name": "b", "size_mib": 64}`).wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
	if !strings.Contains(string(r.body), "volume_mib") {
		t.Fatalf("quota refusal does not name the limit: %s", r.body)
	}
	// Another project has its own total.
	e.do("POST", "/v1/volumes", e.keyB, `{"name": "b", "size_mib": 64}`).want(t, http.StatusCreated)
	// What is left still fits.
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "c", "size_mib": 36}`).want(t, http.StatusCreated)
}

// TestVolumeMountedBySandbox: a create mounts a volume by name, is placed
// on (and binds the volume to) its node, and the volume cannot be deleted
// until the sandbox is.
func TestVolumeMountedBySandbox(t *testing.T) {
	host := &fakeVolumeHost{}
	e := newEnv(t, withVolumes(host, 0))
	var v apiv1.Volume
	e.do("POST", "/v1/volumes", e.keyA, `{"name": "data", "size_mib": 64}`).want(t, http.StatusCreated).decode(t, &v)
	e.do("POST", "/v1/sandboxes", e.keyA, `{"volume_mounts": [{"volume": "data", "path": "/data"}, {"volume": "data", "path": "/other"}]}`).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	sb := e.createSandbox(e.keyA, `{"volume_mounts": [{"volume": "data", "path": "/home/user/data"}]}`)
	if len(sb.Sandbox.VolumeMounts) != 1 || sb.Sandbox.VolumeMounts[0] != (apiv1.VolumeMount{Volume: v.ID, Path: "/home/user/data"}) {
		t.Fatalf("sandbox mounts %+v", sb.Sandbox.VolumeMounts)
	}
	var got apiv1.Volume
	e.do("GET", "/v1/volumes/data", e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.NodeID != string(testNode) || len(got.MountedBy) != 1 || got.MountedBy[0] != sb.Sandbox.ID || got.UsedBytes == nil {
		t.Fatalf("volume after a mount = %+v", got)
	}
	e.do("DELETE", "/v1/volumes/data", e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeVolumeInUse)
	id := model.SandboxID(sb.Sandbox.ID)
	e.finishCreate(id)
	e.do("DELETE", "/v1/sandboxes/"+sb.Sandbox.ID, e.keyA, "").want(t, http.StatusAccepted)
	// Deleting is not deleted: still mounted.
	e.do("DELETE", "/v1/volumes/data", e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeVolumeInUse)
	e.finishDelete(id)
	e.do("DELETE", "/v1/volumes/data", e.keyA, "").want(t, http.StatusOK)
	if len(host.removed) != 1 {
		t.Fatalf("removed %v", host.removed)
	}
}

// TestVolumeCreateIdempotentTwins: racing twins of one POST /v1/volumes
// (the same Idempotency-Key) make one volume and all answer its 201: the
// key's record is written in the volume's transaction, so a twin that
// found none yet is told of it by the store (before, it was written after,
// and a twin got 409 already_exists for the name its sibling took).
func TestVolumeCreateIdempotentTwins(t *testing.T) {
	e := newEnv(t, withVolumes(&fakeVolumeHost{}, 0))
	const twins = 16
	answers := make([]<-chan *resp, twins)
	for i := range answers {
		answers[i] = e.sendAsync(t, req{method: "POST", path: "/v1/volumes", key: e.keyA, header: idem("vol-twins"),
			body: `{"name": "data", "size_mib": 64}`})
	}
	var first []byte
	for _, ch := range answers {
		r := <-ch
		if r.status != http.StatusCreated {
			t.Fatalf("a twin: %d %s, want 201", r.status, r.body)
		}
		if first == nil {
			first = r.body
		} else if string(r.body) != string(first) {
			t.Fatalf("twins answered differently:\n%s\n%s", first, r.body)
		}
	}
	var list apiv1.VolumeList
	e.do("GET", "/v1/volumes", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Volumes) != 1 {
		t.Fatalf("%d volumes after %d twins, want 1", len(list.Volumes), twins)
	}
}
