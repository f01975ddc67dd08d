package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestFileCallsCarryUser: with AsUser every file call names the user
// (query for stat/list, body for the rest); without it, none.
func TestFileCallsCarryUser(t *testing.T) {
	sb := model.NewSandboxID()
	var (
		mu   sync.Mutex
		seen = map[string]string{} // route → user it carried ("" for none)
	)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		user := r.URL.Query().Get(apiv1.FileUserQuery)
		if r.Method == http.MethodPost {
			var body struct {
				Direction string      `json:"direction"`
				User      *apiv1.User `json:"user"`
			}
			data, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(data, &body)
			if body.User != nil {
				b, _ := json.Marshal(body.User)
				user = string(b)
			}
			if op == "transfers" {
				op = body.Direction
			}
		}
		if strings.HasPrefix(r.URL.Path, "/data/") {
			op = "data-" + op
		}
		mu.Lock()
		seen[op] = user
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/transfers"):
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(apiv1.Transfer{URL: srv.URL + "/data/x/" + op, Method: apiv1.TransferMethod(op), Token: "alf_x"})
		default:
			_, _ = io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "alk_test")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := func(opts ...FileOption) {
		_, _ = c.StatFile(ctx, sb, "/a", opts...)
		_, _ = c.ListFiles(ctx, sb, "/a", opts...)
		_, _ = c.Mkdir(ctx, sb, "/a", opts...)
		_, _ = c.MoveFile(ctx, sb, apiv1.MoveRequest{From: "/a", To: "/b"}, opts...)
		_ = c.RemoveFile(ctx, sb, "/a", false, opts...)
		if body, _, err := c.Download(ctx, sb, "/a", opts...); err == nil {
			body.Close()
		}
		_, _ = c.Upload(ctx, sb, "/a", -1, strings.NewReader("x"), opts...)
		if body, err := c.TarOut(ctx, sb, "/a", opts...); err == nil {
			body.Close()
		}
		_, _ = c.TarIn(ctx, sb, "/a", strings.NewReader(""), opts...)
	}
	want := map[string]string{
		"stat": "1000:1001", "list": "1000:1001",
		"mkdir": `{"uid":1000,"gid":1001}`, "move": `{"uid":1000,"gid":1001}`, "remove": `{"uid":1000,"gid":1001}`,
		apiv1.DirectionDownload: `{"uid":1000,"gid":1001}`, apiv1.DirectionUpload: `{"uid":1000,"gid":1001}`,
		apiv1.DirectionTarOut: `{"uid":1000,"gid":1001}`, apiv1.DirectionTarIn: `{"uid":1000,"gid":1001}`,
	}
	for _, tc := range []struct {
		name string
		opts []FileOption
		user bool
	}{{"as user", []FileOption{AsUser(&apiv1.User{UID: 1000, GID: 1001})}, true}, {"no option", nil, false}, {"nil user", []FileOption{AsUser(nil)}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(seen)
			mu.Unlock()
			calls(tc.opts...)
			mu.Lock()
			defer mu.Unlock()
			for op, u := range want {
				got, ok := seen[op]
				if !ok {
					t.Errorf("%s: no request", op)
					continue
				}
				if !tc.user {
					u = ""
				}
				if got != u {
					t.Errorf("%s carried user %q, want %q", op, got, u)
				}
			}
		})
	}
}
