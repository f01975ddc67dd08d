package api

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// userFilesEnv is a filesEnv whose root holds /h, owned by 1000:1000 with
// mode 0700, and a running sandbox.
func userFilesEnv(t *testing.T) (f *filesEnv, sb string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, setfsuid)")
	}
	f = newFilesEnv(t)
	// The test's temp dirs are 0700: let other users through to the root.
	for d := f.root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := filepath.Join(f.root, "h")
	if err := os.Mkdir(h, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	sb = f.createSandbox(f.keyA, `{}`).Sandbox.ID
	f.finishCreate(model.SandboxID(sb))
	return f, sb
}

func owner(t *testing.T, p string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return jsonUser(int64(st.Uid), int64(st.Gid))
}

func jsonUser(uid, gid int64) string {
	b, _ := json.Marshal(apiv1.User{UID: uid, GID: gid})
	return string(b)
}

// transferAs is filesEnv.transfer with a user.
func (f *filesEnv) transferAs(key, sb, path, direction string, u *apiv1.User) apiv1.Transfer {
	f.t.Helper()
	var tr apiv1.Transfer
	body, _ := json.Marshal(apiv1.CreateTransferRequest{Path: path, Direction: direction, User: u})
	f.do("POST", "/v1/sandboxes/"+sb+"/files/transfers", key, string(body)).want(f.t, http.StatusCreated).decode(f.t, &tr)
	tr.URL = f.dp.URL + strings.TrimPrefix(tr.URL, f.srv.URL)
	return tr
}

// TestFileUserAPI: every file route passes its user to the agent — the
// owner of /h may work in it and what it creates is its own; another user
// is refused (403 permission_denied) by the kernel.
func TestFileUserAPI(t *testing.T) {
	t.Parallel()
	f, sb := userFilesEnv(t)
	base := "/v1/sandboxes/" + sb + "/files"
	own := &apiv1.User{UID: 1000, GID: 1000}
	other := &apiv1.User{UID: 1001, GID: 1001}
	ownJSON, otherJSON := jsonUser(1000, 1000), jsonUser(1001, 1001)

	// mkdir
	f.do("POST", base+"/mkdir", f.keyA, `{"path": "/h/d", "user": `+otherJSON+`}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	f.do("POST", base+"/mkdir", f.keyA, `{"path": "/h/d", "user": `+ownJSON+`}`).want(t, http.StatusOK)
	if got := owner(t, filepath.Join(f.root, "h/d")); got != ownJSON {
		t.Fatalf("mkdir made a directory owned by %s", got)
	}
	// upload
	up := f.transferAs(f.keyA, sb, "/h/d/f", apiv1.DirectionUpload, other)
	wantDP(t, f.send("PUT", up.URL, up.Token, strings.NewReader("x"), "application/octet-stream"), http.StatusForbidden, apiv1.CodePermissionDenied)
	up = f.transferAs(f.keyA, sb, "/h/d/f", apiv1.DirectionUpload, own)
	wantDP(t, f.send("PUT", up.URL, up.Token, strings.NewReader("hello"), "application/octet-stream"), http.StatusOK, "")
	if got := owner(t, filepath.Join(f.root, "h/d/f")); got != ownJSON {
		t.Fatalf("upload made a file owned by %s", got)
	}
	// tar-in
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "t.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hi"))
	tw.Close()
	tin := f.transferAs(f.keyA, sb, "/h/tar", apiv1.DirectionTarIn, other)
	wantDP(t, f.send("PUT", tin.URL, tin.Token, bytes.NewReader(tb.Bytes()), "application/x-tar"), http.StatusForbidden, apiv1.CodePermissionDenied)
	tin = f.transferAs(f.keyA, sb, "/h/tar", apiv1.DirectionTarIn, own)
	wantDP(t, f.send("PUT", tin.URL, tin.Token, bytes.NewReader(tb.Bytes()), "application/x-tar"), http.StatusOK, "")
	if got := owner(t, filepath.Join(f.root, "h/tar/t.txt")); got != ownJSON {
		t.Fatalf("tar-in made a file owned by %s", got)
	}
	// reads: stat, list (query), download, tar-out, watch
	for _, u := range []struct {
		q      string
		tu     *apiv1.User
		status int
	}{{"1001:1001", other, http.StatusForbidden}, {"1000:1000", own, http.StatusOK}} {
		code := ""
		if u.status != http.StatusOK {
			code = apiv1.CodePermissionDenied
		}
		for _, route := range []string{"/stat?path=/h/d/f&user=", "/list?path=/h/d&user="} {
			r := f.do("GET", base+route+u.q, f.keyA, "")
			if code != "" {
				r.wantError(t, u.status, code)
			} else {
				r.want(t, u.status)
			}
		}
		for _, dir := range []struct{ path, direction string }{{"/h/d/f", apiv1.DirectionDownload}, {"/h/d", apiv1.DirectionTarOut}, {"/h/d", apiv1.DirectionWatch}} {
			tr := f.transferAs(f.keyA, sb, dir.path, dir.direction, u.tu)
			res := f.send("GET", tr.URL, tr.Token, nil, "")
			if dir.direction == apiv1.DirectionWatch && res.StatusCode == http.StatusOK {
				res.Body.Close() // a watch streams until closed
				continue
			}
			wantDP(t, res, u.status, code)
		}
	}
	// move, remove
	f.do("POST", base+"/move", f.keyA, `{"from": "/h/d/f", "to": "/h/d/g", "user": `+otherJSON+`}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	f.do("POST", base+"/move", f.keyA, `{"from": "/h/d/f", "to": "/h/d/g", "user": `+ownJSON+`}`).want(t, http.StatusOK)
	f.do("POST", base+"/remove", f.keyA, `{"path": "/h/d", "recursive": true, "user": `+otherJSON+`}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	f.do("POST", base+"/remove", f.keyA, `{"path": "/h/d", "recursive": true, "user": `+ownJSON+`}`).want(t, http.StatusOK)
	if _, err := os.Stat(filepath.Join(f.root, "h/d")); !os.IsNotExist(err) {
		t.Fatalf("/h/d still there: %v", err)
	}
	// Without a user: the agent (root here).
	f.do("POST", base+"/mkdir", f.keyA, `{"path": "/h/r"}`).want(t, http.StatusOK)
	if got := owner(t, filepath.Join(f.root, "h/r")); got != jsonUser(0, 0) {
		t.Fatalf("mkdir without a user made a directory owned by %s", got)
	}

	// Bad users are refused before the agent.
	for _, bad := range []string{`{"uid": -1, "gid": 0}`, `{"uid": 2147483647, "gid": 0}`} {
		f.send2(req{method: "POST", path: base + "/mkdir", key: f.keyA, body: `{"path": "/h/x", "user": ` + bad + `}`, invalid: true}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	for _, bad := range []struct {
		user    string
		invalid bool // the OpenAPI pattern refuses it too
	}{{"1000", true}, {"x:1", true}, {"-1:0", true}, {"2147483647:0", false}} {
		f.send2(req{method: "GET", path: base + "/stat?path=/h&user=" + bad.user, key: f.keyA, invalid: bad.invalid}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
}

// TestFileUserTokenFixed: the user of a transfer is in its signed token:
// the data-plane request cannot change it, and an edited token is refused.
func TestFileUserTokenFixed(t *testing.T) {
	t.Parallel()
	f, sb := userFilesEnv(t)
	tr := f.transferAs(f.keyA, sb, "/h/f", apiv1.DirectionUpload, &apiv1.User{UID: 1001, GID: 1001})
	// Query parameters and headers do not reach the agent as a user.
	res := f.send("PUT", tr.URL+"?user=1000:1000", tr.Token, strings.NewReader("x"), "application/octet-stream")
	wantDP(t, res, http.StatusForbidden, apiv1.CodePermissionDenied)
	// Rewriting the token's user breaks its signature.
	parts := strings.Split(strings.TrimPrefix(tr.Token, "alf_"), ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(payload), `"uid":1001,"gid":1001`, `"uid":1000,"gid":1000`, 1)
	if edited == string(payload) {
		t.Fatalf("no user claim in %s", payload)
	}
	forged := "alf_" + parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(edited)) + "." + parts[2]
	wantDP(t, f.send("PUT", tr.URL, forged, strings.NewReader("x"), "application/octet-stream"), http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	if _, err := os.Stat(filepath.Join(f.root, "h/f")); !os.IsNotExist(err) {
		t.Fatalf("/h/f was written: %v", err)
	}
}
