package control

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// fakeFiles lays every COPY as one pair, recording what it was asked.
type fakeFiles struct{ asked []string }

func (f *fakeFiles) lay(i int, hash, src, dest string) ([][3]string, error) {
	f.asked = append(f.asked, src+" "+dest)
	to := dest
	if strings.HasSuffix(dest, "/") {
		to = dest + "x"
	}
	return [][3]string{{"s", filepath.Dir(to), to}}, nil
}

func TestTranslate(t *testing.T) {
	start := tplBuildStart{Steps: []tplStep{
		{Type: "COPY", Args: []string{"folder/*", "folder", "", ""}, FilesHash: strings.Repeat("a", 64)},
		{Type: "RUN", Args: []string{"cat folder/test.txt"}},
		{Type: "RUN", Args: []string{"whoami", "root"}},
		{Type: "ENV", Args: []string{"A", "1", "B", "two words"}},
		{Type: "WORKDIR", Args: []string{"/app"}},
		{Type: "RUN", Args: []string{"echo $A > a"}},
		{Type: "USER", Args: []string{"root"}},
		{Type: "COPY", Args: []string{"x.sh", ".", "", "0700"}, FilesHash: strings.Repeat("b", 64)},
	}}
	var files fakeFiles
	doc, err := translate(start, tplBase{Ref: "default", HasUser: true}, &files)
	if err != nil {
		t.Fatal(err)
	}
	if doc.From.Template != "default" || doc.Workdir != "/app" || doc.User != "root" || doc.Env["B"] != "two words" {
		t.Errorf("doc = %+v", doc)
	}
	if strings.Join(files.asked, "|") != "folder/* /home/user/folder|x.sh /app/" {
		t.Errorf("copies asked: %q", files.asked)
	}
	s := doc.Steps
	want := []string{"copy", "run chown", "run cat", "run whoami", "run mkdir", "run echo", "copy"}
	if len(s) != len(want) {
		t.Fatalf("steps: %+v", s)
	}
	if s[1].User != "root" || !strings.Contains(s[1].Run, "chown -hR -- 'user' '/home/user/folder'") {
		t.Errorf("the chown after a copy: %+v", s[1])
	}
	if s[2].User != "user" || s[2].Workdir != "/home/user" || s[3].User != "root" {
		t.Errorf("runs as the E2B user in its home, or as asked: %+v %+v", s[2], s[3])
	}
	if s[4].User != "root" || s[4].Workdir != "/home/user" || s[4].Run != "mkdir -p -- '/app' && chown -- 'user' '/app'" {
		t.Errorf("WORKDIR: %+v", s[4])
	}
	if s[5].Workdir != "/app" || s[5].Env["A"] != "1" || s[5].User != "user" {
		t.Errorf("a run after WORKDIR and ENV: %+v", s[5])
	}
	if s[6].Copy == nil || s[6].Copy.Mode != "0700" {
		t.Errorf("copy with a mode, as root (no chown after): %+v", s[6])
	}
	// The recipe parses: the translation's output is the native input.
	text, _ := json.Marshal(doc)
	r, err := recipe.Parse(text)
	if err != nil {
		t.Fatalf("the recipe does not parse: %v\n%s", err, text)
	}
	if got := r.Steps(); len(got) != len(want) || got[2].User != "user" || got[2].Workdir != "/home/user" {
		t.Errorf("parsed steps: %+v", got)
	}

	// Consecutive RUNs as one user in one directory share a sandbox.
	doc, err = translate(tplBuildStart{Steps: []tplStep{{Type: "RUN", Args: []string{"a"}}, {Type: "RUN", Args: []string{"b"}}, {Type: "RUN", Args: []string{"c", "root"}}}},
		tplBase{Ref: "default", HasUser: true}, &files)
	if err != nil || len(doc.Steps) != 2 || doc.Steps[0].Run != "(a) && (b)" || doc.Steps[1].Run != "c" {
		t.Errorf("joined runs: %+v, %v", doc.Steps, err)
	}

	// Without E2B's user on the base: root in /.
	doc, err = translate(tplBuildStart{Steps: []tplStep{{Type: "RUN", Args: []string{"id"}}}}, tplBase{Ref: "minimal"}, &files)
	if err != nil || doc.Steps[0].User != "root" || doc.Steps[0].Workdir != "/" {
		t.Errorf("on a base without user: %+v, %v", doc, err)
	}

	// startCmd and readyCmd: the template's, run as the builder's last
	// user in its last directory (here the E2B user in its home).
	sc, rc := `echo "Hello, world!"`, "sleep 10"
	doc, err = translate(tplBuildStart{StartCmd: &sc, ReadyCmd: &rc, Steps: []tplStep{{Type: "WORKDIR", Args: []string{"/app"}}}},
		tplBase{Ref: "default", HasUser: true}, &files)
	if err != nil || doc.StartCmd != sc || doc.ReadyCmd != rc || doc.User != "user" || doc.Workdir != "/app" {
		t.Fatalf("start and ready commands: %+v, %v", doc, err)
	}
	text, _ = json.Marshal(doc)
	if r, err = recipe.Parse(text); err != nil || r.Start() != (recipe.Start{Cmd: sc, ReadyCmd: rc}) || r.User() != "user" {
		t.Fatalf("the recipe with start and ready commands: %+v %v\n%s", r.Start(), err, text)
	}
	blank := " "
	if _, err := translate(tplBuildStart{StartCmd: &blank}, tplBase{Ref: "default"}, &files); err == nil {
		t.Error("a blank startCmd is taken")
	}

	for name, steps := range map[string][]tplStep{
		"unknown type":  {{Type: "FROM", Args: []string{"x"}}},
		"odd env":       {{Type: "ENV", Args: []string{"A"}}},
		"copy no hash":  {{Type: "COPY", Args: []string{"a", "b"}}},
		"bad mode":      {{Type: "COPY", Args: []string{"a", "b", "", "999"}, FilesHash: strings.Repeat("a", 64)}},
		"empty run":     {{Type: "RUN", Args: []string{" "}}},
		"workdir empty": {{Type: "WORKDIR", Args: []string{""}}},
	} {
		_, err := translate(tplBuildStart{Steps: steps}, tplBase{Ref: "default"}, &files)
		if he, ok := asHTTPError(err); !ok || he.status != http.StatusBadRequest {
			t.Errorf("%s: %v, want a 400", name, err)
		}
	}
}

// tarOf makes a (gzipped) archive of entries.
func tarOf(t *testing.T, gz bool, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	} else {
		w = tar.NewWriter(&buf)
	}
	for _, h := range entries {
		body := []byte(h.Linkname)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
			body = []byte(h.Name)
		} else {
			body = nil
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			w.Write(body)
		}
	}
	w.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func TestLayCopy(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	if err := os.WriteFile(archive, tarOf(t, true,
		&tar.Header{Name: "folder/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "folder/test.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		&tar.Header{Name: "folder/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		&tar.Header{Name: "one.txt", Typeflag: tar.TypeReg, Mode: 0o600},
	), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src, dest string
		want      [][2]string // (dest dir, destination)
	}{
		{"folder/*", "/home/user/folder", [][2]string{{"/home/user/folder", "/home/user/folder/link"}, {"/home/user/folder", "/home/user/folder/test.txt"}}},
		{"folder", "/app/f", [][2]string{{"/app", "/app/f"}}},
		{"one.txt", "/app/", [][2]string{{"/app", "/app/one.txt"}}},
		{"one.txt", "/etc/renamed", [][2]string{{"/etc", "/etc/renamed"}}},
	} {
		ctxDir := t.TempDir()
		x := filepath.Join(ctxDir, "x0")
		if err := extractArchive(archive, x); err != nil {
			t.Fatal(err)
		}
		got, err := layCopy(ctxDir, x, 0, tc.src, tc.dest)
		if err != nil {
			t.Fatalf("%s → %s: %v", tc.src, tc.dest, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s → %s: %v", tc.src, tc.dest, got)
		}
		for i, p := range got {
			if p[1] != tc.want[i][0] || p[2] != tc.want[i][1] {
				t.Errorf("%s → %s: %v, want %v", tc.src, tc.dest, got, tc.want)
			}
			// The source dir holds the destination's name.
			if _, err := os.Lstat(filepath.Join(ctxDir, p[0], filepath.Base(p[2]))); err != nil {
				t.Errorf("%s → %s: %v", tc.src, tc.dest, err)
			}
		}
	}
}

// Archives are the caller's: nothing of one lands outside its directory.
func TestExtractArchiveContained(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"dotdot":           {{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute":         {{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"through symlink":  {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"abs symlink path": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"hardlink":         {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}},
		"device":           {{Name: "d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}},
	} {
		t.Run(name, func(t *testing.T) {
			outer := t.TempDir()
			archive := filepath.Join(outer, "a.tar")
			if err := os.WriteFile(archive, tarOf(t, false, entries...), 0o600); err != nil {
				t.Fatal(err)
			}
			err := extractArchive(archive, filepath.Join(outer, "x"))
			if he, ok := asHTTPError(err); !ok || he.status != http.StatusBadRequest {
				t.Errorf("err = %v, want a 400", err)
			}
			for _, p := range []string{filepath.Join(outer, "escape"), "/escape", "/tmp/escape"} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists: %v", p, err)
				}
			}
		})
	}
}

// Upload URLs are signed for one key's scope and one hash, and expire.
func TestUploadURLSigned(t *testing.T) {
	fs, err := newTplFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hash, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	scope := scopeOf("e2b_key1")
	u, err := url.Parse(fs.uploadURL("http://h", "tpl", scope, hash))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if got, ok := fs.verify(q, hash); !ok || got != scope {
		t.Fatalf("a fresh URL: %q %v", got, ok)
	}
	if _, ok := fs.verify(q, other); ok {
		t.Error("the URL of one hash took another")
	}
	forged := url.Values{}
	for k, v := range q {
		forged[k] = v
	}
	forged.Set("scope", scopeOf("e2b_key2"))
	if _, ok := fs.verify(forged, hash); ok {
		t.Error("a URL with another key's scope was taken")
	}
	expired := url.Values{}
	for k, v := range q {
		expired[k] = v
	}
	past := time.Now().Add(-time.Minute).Unix()
	expired.Set("expires", strings.TrimSpace(strings.Repeat(" ", 0)+itoa(past)))
	expired.Set("signature", fs.sign(scope, hash, past))
	if _, ok := fs.verify(expired, hash); ok {
		t.Error("an expired URL was taken")
	}
	// One key's upload is not another's.
	if err := fs.put(scope, hash, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	if !fs.has(scope, hash) || fs.has(scopeOf("e2b_key2"), hash) {
		t.Error("uploads are not per key")
	}
}

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The template routes through a Handler with a files directory: request a
// build, alias lookups, refusals before anything is queued, and uploads
// that need the server's signature.
func TestTemplateRoutes(t *testing.T) {
	var imports atomic.Int32
	var recipes atomic.Value
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/v1/templates/default":
			_ = json.NewEncoder(w).Encode(apiv1.Template{Digest: "sha256:" + strings.Repeat("a", 64), Names: []string{"default:latest"}})
		case r.Method == "POST" && r.URL.Path == "/v1/templates":
			imports.Add(1)
			var req apiv1.ImportTemplateRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			recipes.Store(req.Recipe)
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(apiv1.Build{ID: "bld_aaaaaaaaaaaaaaaaaaaaaaaaaa", State: "pending"})
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeTemplateNotFound, Message: "template not found"})
		}
	})
	do := buildsHandler(t, native, newMemBuilds(), t.TempDir())
	if code, body := do("GET", "/templates/aliases/base", "k", ""); code != 200 || !strings.Contains(body, `"templateID":"base"`) {
		t.Errorf("alias base: %d %s", code, body)
	}
	if code, _ := do("GET", "/templates/aliases/nope", "k", ""); code != 404 {
		t.Errorf("alias nope: %d", code)
	}
	code, body := do("POST", "/v3/templates", "k", `{"name":"my-tpl:v1","tags":["x"],"cpuCount":2,"memoryMB":1024}`)
	var rb struct {
		TemplateID, BuildID string
		Names, Tags         []string
	}
	if err := json.Unmarshal([]byte(body), &rb); code != 202 || err != nil || rb.TemplateID != "my-tpl" || rb.BuildID == "" ||
		strings.Join(rb.Names, ",") != "my-tpl:v1,my-tpl:x" {
		t.Fatalf("request build: %d %s", code, body)
	}
	status := "/templates/my-tpl/builds/" + rb.BuildID + "/status"
	if code, body := do("GET", status, "k", ""); code != 200 || !strings.Contains(body, `"status":"waiting"`) {
		t.Errorf("status before the start: %d %s", code, body)
	}
	if code, _ := do("GET", status, "other-key", ""); code != 404 {
		t.Errorf("another key's build: %d, want 404", code)
	}
	start := "/v2/templates/my-tpl/builds/" + rb.BuildID
	if code, body := do("POST", start, "k", `{"fromTemplate":"base","startCmd":" ","steps":[]}`); code != 400 || !strings.Contains(body, "startCmd") {
		t.Errorf("a blank startCmd: %d %s", code, body)
	}
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"fromImage":"ubuntu:22.04","fromImageRegistry":{"type":"aws","awsAccessKeyId":"a","awsSecretAccessKey":"b","awsRegion":"r"},"steps":[]}`, 501, "aws is not supported"},
		{`{"fromImage":"ubuntu:22.04","fromImageRegistry":{"type":"gcp","serviceAccountJson":"{}"},"steps":[]}`, 501, "gcp is not supported"},
		{`{"fromImage":"ubuntu:22.04","fromImageRegistry":{"type":"registry","username":"u"},"steps":[]}`, 400, "needs a username and a password"},
		{`{"fromImage":"ubuntu:22.04","fromImageRegistry":{"type":"ftp"},"steps":[]}`, 400, "not one of"},
		{`{"fromTemplate":"base","fromImageRegistry":{"type":"registry","username":"u","password":"p"},"steps":[]}`, 400, "goes with fromImage"},
		{`{"fromImage":"ubuntu:22.04","steps":[{"type":"RUN","args":[]}]}`, 400, "step 1 RUN"},
	} {
		if code, body := do("POST", start, "k", c.body); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d %q", c.body, code, body, c.code, c.want)
		}
	}
	hash := strings.Repeat("c", 64)
	if code, body := do("POST", start, "k", `{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","b"],"filesHash":"`+hash+`"}]}`); code != 400 || !strings.Contains(body, "not uploaded") {
		t.Errorf("a COPY of files never uploaded: %d %s", code, body)
	}
	if imports.Load() != 0 {
		t.Errorf("refused starts queued %d native builds", imports.Load())
	}
	// The upload link, then a PUT with it; a forged one is refused.
	code, body = do("GET", "/templates/my-tpl/files/"+hash, "k", "")
	var link struct {
		Present bool
		URL     string
	}
	if err := json.Unmarshal([]byte(body), &link); code != 201 || err != nil || link.Present || link.URL == "" {
		t.Fatalf("upload link: %d %s", code, body)
	}
	u, _ := url.Parse(link.URL)
	forged := strings.Replace(u.RequestURI(), "signature=", "signature=0", 1)
	if code, _ := do("PUT", forged, "", "x"); code != 403 {
		t.Errorf("a forged upload URL: %d, want 403", code)
	}
	archive := tarOf(t, true, &tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644})
	if code, body := do("PUT", u.RequestURI(), "", string(archive)); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := do("GET", "/templates/my-tpl/files/"+hash, "k", ""); code != 201 || !strings.Contains(body, `"present":true`) {
		t.Errorf("after the upload: %d %s", code, body)
	}
	if code, body := do("GET", "/templates/my-tpl/files/"+hash, "other-key", ""); !strings.Contains(body, `"present":false`) {
		t.Errorf("another key sees the upload: %d %s", code, body)
	}
	if code, body := do("POST", start, "k", `{"fromTemplate":"base","startCmd":"sleep 100","readyCmd":"pgrep sleep","steps":[{"type":"COPY","args":["a","/b"],"filesHash":"`+hash+`"},{"type":"RUN","args":["cat /b"]}]}`); code != 202 || imports.Load() != 1 {
		t.Errorf("start: %d %s (%d imports)", code, body, imports.Load())
	}
	if got, _ := recipes.Load().(string); !strings.Contains(got, `"start_cmd":"sleep 100"`) || !strings.Contains(got, `"ready_cmd":"pgrep sleep"`) {
		t.Errorf("the native recipe lacks the start and ready commands: %s", got)
	}
	if code, _ := do("POST", start, "k", `{"fromTemplate":"base","steps":[]}`); code != 409 {
		t.Errorf("a second start: %d, want 409", code)
	}
}
