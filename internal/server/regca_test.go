package server

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --registry-ca: pulls trust the CA in the file besides the system's; a
// missing file or one without a certificate is refused at start.
func TestRegistryTransport(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tr, err := registryTransport(""); tr != nil || err != nil {
		t.Errorf("no --registry-ca: %v %v, want the default", tr, err)
	}
	for _, f := range []string{filepath.Join(dir, "missing.pem"), junk} {
		if _, err := registryTransport(f); err == nil || !strings.Contains(err.Error(), "--registry-ca") {
			t.Errorf("%s: %v, want a --registry-ca error", f, err)
		}
	}
	tr, err := registryTransport(ca)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil || res.StatusCode != 204 {
		t.Fatalf("GET through the transport: %v %v", res, err)
	}
	res.Body.Close()
	if _, err := (&http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}).Get(srv.URL); err == nil {
		t.Errorf("the system's roots alone trust the test CA: the check proves nothing")
	}
}
