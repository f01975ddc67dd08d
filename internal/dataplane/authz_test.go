package dataplane

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
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

// forge signs a token the way an attacker would: any method, any key, any
// header and payload.
func forge(t *testing.T, m jwt.SigningMethod, key any, header map[string]any, payload jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, payload)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return "alt_" + s
}

// payloadFor is the payload the API would sign for cs at iat.
func (f *fixture) payloadFor(cs model.CommandSession, iat time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"sid": cs.ID.String(), "sbx": cs.SandboxID.String(), "pid": cs.ProcessID.String(), "node": f.node.String(),
		"act": []string{"read", "stdin", "signal", "resize"}, "iss": "airlock", "aud": []string{"airlock-attach"},
		"iat": iat.Unix(), "nbf": iat.Unix(), "exp": iat.Add(auth.AttachTokenTTL).Unix(),
	}
}

func segment(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestAttachAttacker: every refused attach answers the right status and
// code, and changes nothing: the process is not started and the session is
// not marked attached.
func TestAttachAttacker(t *testing.T) {
	f := newFixture(t)
	now := f.clock()
	target := f.commandSession(f.sandbox, "true")
	other := f.commandSession(f.sandbox, "true")
	kid := f.ring.Keys()[0].ID
	_, stranger, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	apiKey, _, _ := auth.GenerateAPIKey()
	e2bKey, _, _, err := auth.GenerateAPIKeyFormat(auth.FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	sandboxTok, err := f.ring.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: target.SandboxID, Project: model.NewProjectID()})
	if err != nil {
		t.Fatal(err)
	}

	good := f.token(target, auth.AllActions(), now, time.Time{})
	parts := strings.Split(strings.TrimPrefix(good, "alt_"), ".")
	otherTok := f.token(other, auth.AllActions(), now, time.Time{})
	readOnly := strings.Split(strings.TrimPrefix(f.token(target, []auth.Action{auth.ActionRead}, now, time.Time{}), "alt_"), ".")
	otherParts := strings.Split(strings.TrimPrefix(otherTok, "alt_"), ".")
	// The public key, which an attacker may know, as an HMAC secret.
	edPub := f.publicKey(t, kid)

	hdr := map[string]any{"kid": kid}
	cases := []struct {
		name   string
		pid    model.ProcessID
		authz  string // Authorization header value
		query  string // ?token=
		status int
		code   string
	}{
		{"management key", target.ProcessID, "Bearer " + apiKey, "", 401, apiv1.CodeWrongTokenKind},
		{"management key in query", target.ProcessID, "", apiKey, 401, apiv1.CodeWrongTokenKind},
		{"E2B-form management key", target.ProcessID, "Bearer " + e2bKey, "", 401, apiv1.CodeWrongTokenKind},
		{"sandbox access token", target.ProcessID, "Bearer " + sandboxTok, "", 401, apiv1.CodeWrongTokenKind},
		{"sandbox access token in query", target.ProcessID, "", sandboxTok, 401, apiv1.CodeWrongTokenKind},
		{"no token", target.ProcessID, "", "", 401, apiv1.CodeUnauthenticated},
		{"basic scheme", target.ProcessID, "Basic " + good, "", 401, apiv1.CodeUnauthenticated},
		{"old-style random token", target.ProcessID, "Bearer alt_" + strings.Repeat("a", 52), "", 401, apiv1.CodeUnauthenticated},
		{"expired", target.ProcessID, "Bearer " + f.token(target, auth.AllActions(), now.Add(-auth.AttachTokenTTL-auth.ClockSkew-2*time.Second), time.Time{}), "", 401, apiv1.CodeTokenExpired},
		{"not yet valid beyond skew", target.ProcessID, "Bearer " + f.token(target, auth.AllActions(), now.Add(auth.ClockSkew+2*time.Second), time.Time{}), "", 401, apiv1.CodeUnauthenticated},
		{"signed by another key", target.ProcessID, "Bearer " + forge(t, jwt.SigningMethodEdDSA, stranger, hdr, f.payloadFor(target, now)), "", 401, apiv1.CodeUnauthenticated},
		{"unknown kid", target.ProcessID, "Bearer " + forge(t, jwt.SigningMethodEdDSA, stranger, map[string]any{"kid": "aaaaaaaaaaaaaaaa"}, f.payloadFor(target, now)), "", 401, apiv1.CodeUnauthenticated},
		{"another token's signature", target.ProcessID, "Bearer alt_" + parts[0] + "." + parts[1] + "." + otherParts[2], "", 401, apiv1.CodeUnauthenticated},
		{"tampered payload", other.ProcessID, "Bearer alt_" + parts[0] + "." + otherParts[1] + "." + parts[2], "", 401, apiv1.CodeUnauthenticated},
		{"tampered payload (actions widened)", target.ProcessID, "Bearer alt_" + readOnly[0] + "." + segment(f.payloadFor(target, now)) + "." + readOnly[2], "", 401, apiv1.CodeUnauthenticated},
		{"alg none", target.ProcessID, "Bearer alt_" + segment(map[string]any{"alg": "none", "typ": "JWT", "kid": kid}) + "." + parts[1] + ".", "", 401, apiv1.CodeUnauthenticated},
		{"HS256 with the public key as secret", target.ProcessID, "Bearer " + forge(t, jwt.SigningMethodHS256, []byte(edPub), hdr, f.payloadFor(target, now)), "", 401, apiv1.CodeUnauthenticated},
		{"wrong process", target.ProcessID, "Bearer " + otherTok, "", 403, apiv1.CodePermissionDenied},
		{"wrong process in query", target.ProcessID, "", otherTok, 403, apiv1.CodePermissionDenied},
		{"no read action", target.ProcessID, "Bearer " + f.token(target, []auth.Action{auth.ActionStdin, auth.ActionSignal}, now, time.Time{}), "", 403, apiv1.CodePermissionDenied},
		{"another node", target.ProcessID, "Bearer " + nodeToken(t, f, target, now), "", 403, apiv1.CodePermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := f.attachURL(tc.pid.String())
			if tc.query != "" {
				url += "?token=" + tc.query
			}
			resp := f.get(url, tc.authz, nil)
			var e apiv1.Error
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tc.status || e.Code != tc.code || e.Message == "" {
				t.Fatalf("status %d, error %+v; want %d %s", resp.StatusCode, e, tc.status, tc.code)
			}
		})
	}
	for _, cs := range []model.CommandSession{target, other} {
		if _, err := f.client.Status(context.Background(), cs.ProcessID.String()); err == nil {
			t.Fatalf("a refused attach started %s", cs.ProcessID)
		}
		got, err := f.st.GetCommandSessionByProcess(context.Background(), cs.ProcessID)
		if err != nil || got.AttachedAt != nil {
			t.Fatalf("session after refused attaches: %+v, %v", got, err)
		}
	}
}

// nodeToken is a genuine token for a sandbox on another node.
func nodeToken(t *testing.T, f *fixture, cs model.CommandSession, iat time.Time) string {
	t.Helper()
	tok, err := f.ring.Issuer().Issue(auth.AttachClaims{
		Session: cs.ID, Sandbox: cs.SandboxID, Process: cs.ProcessID, Node: model.NewNodeID(),
		Actions: auth.AllActions(), IssuedAt: iat,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// publicKey reads the public half of a key of the fixture's keyring.
func (f *fixture) publicKey(t *testing.T, kid string) ed25519.PublicKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.ringDir, kid+".key"))
	if err != nil {
		t.Fatal(err)
	}
	var kf struct {
		Seed []byte `json:"ed25519_seed"`
	}
	if err := json.Unmarshal(b, &kf); err != nil || len(kf.Seed) != ed25519.SeedSize {
		t.Fatalf("key file: %v", err)
	}
	return ed25519.NewKeyFromSeed(kf.Seed).Public().(ed25519.PublicKey)
}

// attachOK attaches, expects 200 and returns the whole stream.
func (f *fixture) attachOK(t *testing.T, pid model.ProcessID, tok string) string {
	t.Helper()
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	if resp.StatusCode != http.StatusOK {
		var e apiv1.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("status %d, error %+v; want 200", resp.StatusCode, e)
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestAttachWithinSkewAccepted(t *testing.T) {
	f := newFixture(t)
	now := f.clock()
	early := f.commandSession(f.sandbox, "true")
	late := f.commandSession(f.sandbox, "true")
	// Issued by a clock 10 s ahead of ours: nbf is in our future, within skew.
	f.attachOK(t, early.ProcessID, f.token(early, auth.AllActions(), now.Add(auth.ClockSkew-5*time.Second), time.Time{}))
	// Expired by our clock, but within skew.
	tok := f.token(late, []auth.Action{auth.ActionRead}, now.Add(-auth.AttachTokenTTL-auth.ClockSkew+5*time.Second), time.Time{})
	f.attachOK(t, late.ProcessID, tok)
}

// TestAttachAcrossRotation: a token signed before a key rotation attaches
// during the overlap window and is refused after it.
func TestAttachAcrossRotation(t *testing.T) {
	f := newFixture(t)
	cs := f.commandSession(f.sandbox, "true")
	// Long-lived, so that only the key's window can end it.
	old := f.token(cs, auth.AllActions(), f.clock(), f.clock().Add(time.Hour))
	if _, err := f.ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	f.advance(auth.MinKeyOverlap - time.Second)
	f.attachOK(t, cs.ProcessID, old)
	f.advance(2 * time.Second)
	resp := f.get(f.attachURL(cs.ProcessID.String()), "Bearer "+old, nil)
	var e apiv1.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 401 || e.Code != apiv1.CodeUnauthenticated {
		t.Fatalf("after the overlap window: status %d, error %+v", resp.StatusCode, e)
	}
	// A token from the new key works.
	f.attachOK(t, cs.ProcessID, f.token(cs, auth.AllActions(), f.clock(), time.Time{}))
}
