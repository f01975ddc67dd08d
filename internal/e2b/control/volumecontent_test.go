package control

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestVolumeContent: each call of E2B's volume content API becomes its
// native call, with the SDK's bearer token as the native key, the query
// translated (mode decimal → octal, force → overwrite / parents) and the
// bytes streamed both ways; the token of VolumeAndToken is the
// configured one.
func TestVolumeContent(t *testing.T) {
	vol := model.NewVolumeID().String()
	var (
		mu   sync.Mutex
		seen []string
	)
	file := apiv1.VolumeFile{Path: "/a/f", Name: "f", Type: "file", Size: 3, Mode: 0o640, MTime: time.Unix(1, 0).UTC()}
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer alv_good" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "invalid volume content token"})
			return
		}
		switch {
		case r.URL.Path == "/v1/volumes/"+vol:
			_ = json.NewEncoder(w).Encode(apiv1.Volume{ID: vol, Name: "data"})
		case strings.HasSuffix(r.URL.Path, "/files/content") && r.Method == "GET":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write([]byte("abc"))
		case strings.HasSuffix(r.URL.Path, "/files/content"):
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(file)
		case strings.HasSuffix(r.URL.Path, "/files/list"):
			_ = json.NewEncoder(w).Encode(apiv1.VolumeFileList{Path: "/", Entries: []apiv1.VolumeFile{file, {Path: "/p", Name: "p", Type: "other"}}})
		case strings.HasSuffix(r.URL.Path, "/files/stat") && r.URL.Query().Get("path") == "/new":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeNotFound, Message: "/new does not exist in the volume"})
		case strings.HasSuffix(r.URL.Path, "/files/remove"):
			_ = json.NewEncoder(w).Encode(apiv1.RemoveResponse{Path: "/a"})
		default:
			_ = json.NewEncoder(w).Encode(file)
		}
	})
	srv := httptest.NewServer(native)
	t.Cleanup(srv.Close)
	h, err := New(Config{
		Native: func(key string) (*client.Client, error) {
			return client.New(srv.URL, key, client.WithHTTPClient(srv.Client()), client.WithRetries(0, 0))
		},
		AccessToken: func(context.Context, apiv1.Sandbox) (string, error) { return "", nil },
		VolumeToken: func(_ context.Context, v apiv1.Volume) (string, error) { return "alv_for_" + v.ID, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, token, body string, status int) string {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != status {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, rec.Code, status, rec.Body)
		}
		return rec.Body.String()
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	var vt volumeAndTokenOut
	_ = json.Unmarshal([]byte(do("GET", "/volumes/"+vol, "alv_good", "", 200)), &vt)
	if vt.Token != "alv_for_"+vol {
		t.Fatalf("VolumeAndToken = %+v", vt)
	}
	base := "/volumecontent/" + vol
	for _, tc := range []struct {
		method, path, body string
		status             int
		native             string
	}{
		{"PUT", base + "/file?path=/a/f&mode=416&uid=1000&force=false", "abc", 201, "PUT /v1/volumes/" + vol + "/files/content?mode=640&overwrite=false&path=%2Fa%2Ff&uid=1000 Bearer alv_good abc"},
		{"GET", base + "/file?path=a/f", "", 200, "GET /v1/volumes/" + vol + "/files/content?path=%2Fa%2Ff Bearer alv_good "},
		{"GET", base + "/path?path=/a/f", "", 200, "GET /v1/volumes/" + vol + "/files/stat?path=%2Fa%2Ff Bearer alv_good "},
		{"GET", base + "/dir?path=/&depth=2", "", 200, "GET /v1/volumes/" + vol + "/files/list?depth=2&path=%2F Bearer alv_good "},
		{"POST", base + "/dir?path=/x/y&force=true&mode=448", "", 201, "POST /v1/volumes/" + vol + `/files/mkdir? Bearer alv_good {"path":"/x/y","mode":448}`},
		{"PATCH", base + "/path?path=/a/f", `{"mode":384}`, 200, "POST /v1/volumes/" + vol + `/files/metadata? Bearer alv_good {"path":"/a/f","mode":384}`},
		{"DELETE", base + "/path?path=/a", "", 204, "POST /v1/volumes/" + vol + `/files/remove? Bearer alv_good {"path":"/a","recursive":true}`},
	} {
		out := do(tc.method, tc.path, "alv_good", tc.body, tc.status)
		if got := last(); got != tc.native {
			t.Errorf("%s %s → native %q, want %q", tc.method, tc.path, got, tc.native)
		}
		if tc.method == "GET" && strings.HasPrefix(tc.path, base+"/file") && out != "abc" {
			t.Errorf("read: %q", out)
		}
		if strings.Contains(tc.path, "/dir?") && tc.method == "GET" {
			var l []volumeEntryOut
			if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 2 || l[0].Mode != 0o640 || l[1].Type != "unknown" {
				t.Errorf("list: %s (%v)", out, err)
			}
		}
	}
	// makeDir without force: the parent must exist and the path must not.
	do("POST", base+"/dir?path=/new", "alv_good", "", 201)
	do("POST", base+"/dir?path=/a/f", "alv_good", "", 409)
	// A wrong token is the native API's 401.
	do("GET", base+"/file?path=/a/f", "alv_wrong", "", 401)
}
