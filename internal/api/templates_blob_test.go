package api

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template/distribute"
)

// withBlobStore gives the API a distributor on the blob store in dir.
func withBlobStore(t *testing.T, dir string) envOption {
	return func(c *envConfig) {
		bs, err := diskstore.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := distribute.New(distribute.Config{Templates: c.tpl, Blobs: bs, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		c.Distribution = d
	}
}

// TestImportTemplateByDigest: a template imported on one server is pushed
// to the blob store, and another server with its own store and database
// imports it by digest and creates a sandbox from it.
func TestImportTemplateByDigest(t *testing.T) {
	t.Parallel()
	blobs := t.TempDir()
	a := newEnv(t, withBlobStore(t, blobs))
	src := filepath.Join(t.TempDir(), "rootfs")
	writeTree(t, src, map[string]string{"bin/hello": "#!/bin/sh\necho from a\n", "srv/only-on-a": "a\n"})
	tpl := a.importTemplate(t, fmt.Sprintf(`{"source": %q}`, src))

	b := newEnv(t, withBlobStore(t, blobs))
	got := b.importTemplate(t, fmt.Sprintf(`{"source": %q, "name": "pulled"}`, tpl.Digest))
	if got.Digest != tpl.Digest || got.SizeBytes != tpl.SizeBytes || len(got.Names) != 1 || got.Names[0] != "pulled:latest" {
		t.Fatalf("pulled %+v, pushed %+v", got, tpl)
	}
	if !b.tpl.Has(model.TemplateDigest(tpl.Digest)) {
		t.Fatal("B's template store lacks the pulled template")
	}
	b.do("POST", "/v1/sandboxes", b.keyA, `{"template": "pulled"}`).want(t, http.StatusAccepted)
	// Again: nothing to pull, the same answer.
	b.importTemplate(t, fmt.Sprintf(`{"source": %q}`, tpl.Digest))

	missing := "sha256:" + strings.Repeat("0", 64)
	if failed := b.importWait(t, fmt.Sprintf(`{"source": %q}`, missing), model.BuildFailed); failed.Error == nil ||
		failed.Error.Code != apiv1.CodeTemplateNotFound {
		t.Fatalf("pull of a digest the blob store lacks: %+v, want %s", failed.Error, apiv1.CodeTemplateNotFound)
	}
	b.send(req{method: "POST", path: "/v1/templates", key: b.admin, body: `{"source": "sha256:ABC"}`, invalid: true, t: t}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	// A server without a blob store cannot pull.
	c := newEnv(t)
	c.do("POST", "/v1/templates", c.admin, fmt.Sprintf(`{"source": %q}`, tpl.Digest)).
		wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
}
