package fakenet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"testing"
)

func TestWriteHeaders(t *testing.T) {
	for _, digest := range []bool{false, true} {
		url := "/headers"
		if digest {
			url += "?digest=1"
		}
		req := httptest.NewRequest("GET", url, nil)
		req.Header.Set("X-Test-Token", "secret-value")
		rec := httptest.NewRecorder()
		writeHeaders(rec, req)
		var out struct {
			Headers map[string][]string `json:"headers"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		want := "secret-value"
		if digest {
			sum := sha256.Sum256([]byte(want))
			want = "sha256:" + hex.EncodeToString(sum[:])
		}
		if got := out.Headers["X-Test-Token"]; len(got) != 1 || got[0] != want {
			t.Fatalf("digest=%v: %v, want %q", digest, got, want)
		}
	}
}
