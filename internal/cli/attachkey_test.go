package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func TestAttachKeyRotate(t *testing.T) {
	f := newFakeServer(t)
	notAfter := fixedTime.Add(135e9)
	var calls int
	var idem string
	mux := f.srv.Config.Handler
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/admin/attach-keys/rotate" {
			mux.ServeHTTP(w, r)
			return
		}
		calls++
		idem = r.Header.Get("Idempotency-Key")
		writeJSON(w, 200, apiv1.AttachKeyList{Keys: []apiv1.AttachKey{
			{ID: "aaaaaaaaaaaaaaaa", CreatedAt: fixedTime, NotAfter: &notAfter},
			{ID: "bbbbbbbbbbbbbbbb", CreatedAt: fixedTime, Active: true},
		}})
	})
	ctx := context.Background()
	code, stdout, stderr := runCLI(ctx, f, "admin", "attach-key", "rotate")
	if code != 0 || calls != 1 || idem == "" || !strings.Contains(stdout, "bbbbbbbbbbbbbbbb") || !strings.Contains(stdout, "KID") {
		t.Fatalf("rotate: %d calls=%d idem=%q\n%s\n%s", code, calls, idem, stdout, stderr)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "admin", "attach-key", "rotate")
	var l apiv1.AttachKeyList
	if code != 0 || json.Unmarshal([]byte(stdout), &l) != nil || len(l.Keys) != 2 || !l.Keys[1].Active {
		t.Fatalf("rotate json: %d %s", code, stdout)
	}
}
