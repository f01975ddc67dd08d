package api

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// TestFilesTokenAttacks: forged, stale, misdirected and wrong-kind tokens
// are refused on the data plane's file route with the right code, and
// nothing in the sandbox changes.
func TestFilesTokenAttacks(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	sbID := model.SandboxID(sb)
	f.finishCreate(sbID)
	if err := os.WriteFile(filepath.Join(f.root, "f"), []byte("orig"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := f.transfer(f.keyA, sb, "/g", apiv1.DirectionUpload)
	dl := f.transfer(f.keyA, sb, "/f", apiv1.DirectionDownload)
	now := f.clock.Now()
	kid := f.ring.Keys()[0].ID
	want := auth.FileClaims{Sandbox: sbID, Path: "/f", Direction: apiv1.DirectionUpload, IssuedAt: now}
	enc := base64.RawURLEncoding

	// Another key under our kid.
	_, otherKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherIss, err := auth.NewIssuer(kid, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := otherIss.IssueFile(want)
	if err != nil {
		t.Fatal(err)
	}
	// Genuine but not valid for another ClockSkew and more.
	early := want
	early.IssuedAt = now.Add(auth.ClockSkew + 2*time.Second)
	notYet, err := f.ring.Issuer().IssueFile(early)
	if err != nil {
		t.Fatal(err)
	}
	// The upload token with its path changed to /f.
	parts := strings.Split(strings.TrimPrefix(up.Token, auth.FilesTokenPrefix), ".")
	raw, err := enc.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var payload jwt.MapClaims
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	payload["path"] = "/f"
	tampered, _ := json.Marshal(payload)
	hdrNone, _ := json.Marshal(map[string]any{"alg": "none", "typ": "JWT", "kid": kid})
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, payload)
	hs.Header["kid"] = kid
	hsSigned, err := hs.SignedString([]byte(otherKey.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	attach, err := f.ring.Issuer().Issue(auth.AttachClaims{Session: model.NewCommandSessionID(), Sandbox: sbID, Process: model.NewProcessID(), Actions: auth.AllActions(), IssuedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	sandboxTok, err := f.ring.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sbID, Project: f.projA})
	if err != nil {
		t.Fatal(err)
	}
	otherSandbox := strings.Replace(up.URL, sb, model.NewSandboxID().String(), 1)
	tarIn := strings.Replace(up.URL, "/files/upload", "/files/tar-in", 1)

	for _, tc := range []struct {
		name, url, token, code string
	}{
		{"signed by another key", up.URL, forged, apiv1.CodeUnauthenticated},
		{"not yet valid beyond skew", up.URL, notYet, apiv1.CodeUnauthenticated},
		{"tampered path", up.URL, "alf_" + parts[0] + "." + enc.EncodeToString(tampered) + "." + parts[2], apiv1.CodeUnauthenticated},
		{"alg none", up.URL, "alf_" + enc.EncodeToString(hdrNone) + "." + enc.EncodeToString(tampered) + ".", apiv1.CodeUnauthenticated},
		{"HS256 with the public key", up.URL, "alf_" + hsSigned, apiv1.CodeUnauthenticated},
		{"attachment token", up.URL, attach, apiv1.CodeWrongTokenKind},
		{"attachment token as alf_", up.URL, "alf_" + strings.TrimPrefix(attach, "alt_"), apiv1.CodeUnauthenticated},
		{"API key", up.URL, f.keyA, apiv1.CodeWrongTokenKind},
		{"sandbox access token", up.URL, sandboxTok, apiv1.CodeWrongTokenKind},
		{"download token on the upload route", up.URL, dl.Token, apiv1.CodeUnauthenticated},
		{"upload token on the tar-in route", tarIn, up.Token, apiv1.CodeUnauthenticated},
		{"upload token for another sandbox", otherSandbox, up.Token, apiv1.CodeUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantDP(t, f.send("PUT", tc.url, tc.token, strings.NewReader("pwned"), "application/octet-stream"), http.StatusUnauthorized, tc.code)
		})
	}
	unchanged := func() {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(f.root, "f")); err != nil || string(b) != "orig" {
			t.Fatalf("/f is %q, %v", b, err)
		}
	}
	unchanged()
	if _, err := os.Stat(filepath.Join(f.root, "g")); !os.IsNotExist(err) {
		t.Fatalf("/g was written: %v", err)
	}

	// A file token cannot attach, even with the attachment prefix.
	attachURL := f.dp.URL + apiv1.AttachPath(model.NewProcessID().String())
	wantDP(t, f.send("GET", attachURL, dl.Token, nil, ""), http.StatusUnauthorized, apiv1.CodeWrongTokenKind)
	wantDP(t, f.send("GET", attachURL, "alt_"+strings.TrimPrefix(dl.Token, "alf_"), nil, ""), http.StatusUnauthorized, apiv1.CodeUnauthenticated)

	// The path is the token's alone: a query cannot redirect the upload.
	wantDP(t, f.send("PUT", up.URL+"?path=/f", up.Token, strings.NewReader("new"), "application/octet-stream"), http.StatusOK, "")
	unchanged()
	if b, err := os.ReadFile(filepath.Join(f.root, "g")); err != nil || string(b) != "new" {
		t.Fatalf("/g is %q, %v", b, err)
	}

	// Past its lifetime and the skew, the genuine token is expired.
	f.clock.mu.Lock()
	f.clock.t = f.clock.t.Add(auth.FileTokenTTL + auth.ClockSkew + time.Second)
	f.clock.mu.Unlock()
	wantDP(t, f.send("PUT", up.URL, up.Token, strings.NewReader("late"), "application/octet-stream"), http.StatusUnauthorized, apiv1.CodeTokenExpired)
	if b, _ := os.ReadFile(filepath.Join(f.root, "g")); string(b) != "new" {
		t.Fatalf("/g is %q after an expired upload", b)
	}
}
