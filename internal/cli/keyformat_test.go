package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// TestKeyCreateFormat: `airlock admin key create --format` sends the
// format (airlock by default) and prints the token the server made; an
// unknown format is a usage error and sends nothing.
func TestKeyCreateFormat(t *testing.T) {
	project := model.NewProjectID().String()
	var got []apiv1.CreateAPIKeyRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/admin/keys" {
			writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req apiv1.CreateAPIKeyRequest
		if err := json.Unmarshal(b, &req); err != nil {
			writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
			return
		}
		got = append(got, req)
		f, err := auth.ParseAPIKeyFormat(req.Format)
		if err != nil {
			writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
			return
		}
		token, id, _, err := auth.GenerateAPIKeyFormat(f)
		if err != nil {
			t.Error(err)
		}
		writeJSON(w, 201, apiv1.APIKey{ID: id.String(), ProjectID: req.ProjectID, Role: req.Role, CreatedAt: fixedTime, Token: token})
	}))
	t.Cleanup(srv.Close)
	cli := func(args ...string) (int, string, string) {
		return runCLI(context.Background(), nil, append([]string{"--url", srv.URL, "--api-key", "k", "-o", "json"}, append([]string{"admin", "key", "create", "--project", project, "--role", "member"}, args...)...)...)
	}
	for _, tc := range []struct {
		args   []string
		format string
		prefix string
	}{
		{nil, "airlock", "alk_"},
		{[]string{"--format", "airlock"}, "airlock", "alk_"},
		{[]string{"--format", "e2b"}, "e2b", "e2b_"},
	} {
		code, stdout, stderr := cli(tc.args...)
		var k apiv1.APIKey
		if code != 0 || json.Unmarshal([]byte(stdout), &k) != nil || !strings.HasPrefix(k.Token, tc.prefix) {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q", tc.args, code, stdout, stderr)
		}
		if last := got[len(got)-1]; last.Format != tc.format || last.ProjectID != project {
			t.Fatalf("%q: sent %+v", tc.args, last)
		}
	}
	n := len(got)
	for _, bad := range []string{"E2B", "alk", "x"} {
		code, _, stderr := cli("--format", bad)
		if code != exitUsage || !strings.Contains(stderr, "--format") || !strings.Contains(stderr, "airlock or e2b") {
			t.Fatalf("--format %s: exit %d, stderr %q", bad, code, stderr)
		}
	}
	if len(got) != n {
		t.Fatalf("a refused format sent %d requests", len(got)-n)
	}
}
