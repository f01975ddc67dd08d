package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeVolumes is a native API that holds volumes and records the calls.
type fakeVolumes struct {
	mu    sync.Mutex
	vols  map[string]apiv1.Volume
	calls []string
	inUse bool
}

func (f *fakeVolumes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	id := strings.TrimPrefix(r.URL.Path, "/v1/volumes/")
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/volumes":
		var in apiv1.CreateVolumeRequest
		_ = json.NewDecoder(r.Body).Decode(&in)
		v := apiv1.Volume{ID: model.NewVolumeID().String(), Name: in.Name, SizeMiB: int(in.SizeMiB)}
		f.vols[v.ID] = v
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(v)
	case r.Method == "GET" && r.URL.Path == "/v1/volumes":
		l := apiv1.VolumeList{Volumes: []apiv1.Volume{}}
		for _, v := range f.vols {
			l.Volumes = append(l.Volumes, v)
		}
		_ = json.NewEncoder(w).Encode(l)
	case f.vols[id].ID == "":
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeVolumeNotFound, Message: "volume not found"})
	case r.Method == "GET":
		_ = json.NewEncoder(w).Encode(f.vols[id])
	case r.Method == "DELETE" && f.inUse:
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeVolumeInUse, Message: "mounted"})
	case r.Method == "DELETE":
		v := f.vols[id]
		delete(f.vols, id)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func TestVolumes(t *testing.T) {
	f := &fakeVolumes{vols: map[string]apiv1.Volume{}}
	h, _ := newTestHandler(t, f)
	do := func(method, path, body string, status int) []byte {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != status {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, status, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var created volumeAndTokenOut
	if err := json.Unmarshal(do("POST", "/volumes", `{"name":"data"}`, 201), &created); err != nil || created.Name != "data" {
		t.Fatalf("create = %+v, %v", created, err)
	}
	if v := f.vols[created.VolumeID]; v.SizeMiB != defaultVolumeMiB {
		t.Fatalf("native volume %+v, want %d MiB", v, defaultVolumeMiB)
	}
	var list []volumeOut
	if err := json.Unmarshal(do("GET", "/volumes", "", 200), &list); err != nil || len(list) != 1 || list[0].VolumeID != created.VolumeID {
		t.Fatalf("list = %+v, %v", list, err)
	}
	var got volumeAndTokenOut
	if err := json.Unmarshal(do("GET", "/volumes/"+created.VolumeID, "", 200), &got); err != nil || got != created {
		t.Fatalf("get = %+v, %v", got, err)
	}
	f.inUse = true
	do("DELETE", "/volumes/"+created.VolumeID, "", 409)
	f.inUse = false
	do("DELETE", "/volumes/"+created.VolumeID, "", 204)
	do("DELETE", "/volumes/"+created.VolumeID, "", 404)
	do("GET", "/volumes/"+created.VolumeID, "", 404)

	// Bad input is refused here, before the native API.
	n := len(f.calls)
	do("POST", "/volumes", `{"name":"../x"}`, 400)
	do("POST", "/volumes", `{}`, 400)
	do("POST", "/volumes", `{"name":"`+strings.Repeat("a", maxBody)+`"}`, 413)
	do("GET", "/volumes/data", "", 404)      // E2B names volumes by ID
	do("DELETE", "/volumes/..%2Fx", "", 404) // never reaches the native API
	if len(f.calls) != n {
		t.Fatalf("refused requests reached the native API: %v", f.calls[n:])
	}
	// The content API names volumes by ID and checks the path here.
	n = len(f.calls)
	do("GET", "/volumecontent/data/file?path=/x", "", 404)
	do("GET", "/volumecontent/"+created.VolumeID+"/file?path=/../x", "", 400)
	if len(f.calls) != n {
		t.Fatalf("refused content requests reached the native API: %v", f.calls[n:])
	}
}

// A refused mount says why, naming the path (the SDK shows the message).
func TestVolumeMountRefusalNamesThePath(t *testing.T) {
	_, err := parseVolumeMounts([]byte(`[{"name":"v","path":"/proc"}]`))
	he, ok := asHTTPError(err)
	if !ok || he.status != http.StatusBadRequest || !strings.Contains(he.msg, `"/proc"`) || !strings.Contains(he.msg, "reserved") {
		t.Fatalf("err = %v, want a 400 naming /proc", err)
	}
}
