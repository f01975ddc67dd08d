package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

func TestVolumeToken(t *testing.T) {
	tk := newTestKeys(t)
	c := VolumeClaims{Volume: model.NewVolumeID(), Project: model.NewProjectID()}
	tok, err := tk.issuer.IssueVolume(c)
	if err != nil {
		t.Fatal(err)
	}
	if KindOf(tok) != KindVolume || KindVolume.String() != "volume content token" {
		t.Fatalf("KindOf(%q) = %v", tok, KindOf(tok))
	}
	if again, _ := tk.issuer.IssueVolume(c); again != tok {
		t.Fatal("a volume token is not deterministic")
	}
	got, err := tk.verifier.VerifyVolumeAt(tok, tk.now.Add(5*365*24*time.Hour))
	if err != nil || got != c {
		t.Fatalf("verify: %+v, %v; want %+v", got, err, c)
	}
	// Forged: another key, a sandbox token, a changed payload, a bare JWT.
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	other, err := NewIssuer(tk.kid, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.IssueVolume(c)
	sbx, _ := tk.issuer.IssueSandbox(SandboxClaims{Sandbox: model.NewSandboxID(), Project: c.Project})
	parts := strings.Split(tok, ".")
	swapped, _ := tk.issuer.IssueVolume(VolumeClaims{Volume: model.NewVolumeID(), Project: c.Project})
	spliced := parts[0] + "." + strings.Split(swapped, ".")[1] + "." + parts[2]
	for name, bad := range map[string]string{
		"other key":      forged,
		"sandbox token":  VolumeTokenPrefix + strings.TrimPrefix(sbx, SandboxTokenPrefix),
		"spliced claims": spliced,
		"no prefix":      strings.TrimPrefix(tok, VolumeTokenPrefix),
		"empty":          "",
	} {
		if _, err := tk.verifier.VerifyVolumeAt(bad, tk.now); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: verified (%v)", name, err)
		}
	}
	// Nor does a volume token pass as a sandbox token.
	if _, err := tk.verifier.VerifySandboxAt(SandboxTokenPrefix+strings.TrimPrefix(tok, VolumeTokenPrefix), tk.now); err == nil {
		t.Error("a volume token verified as a sandbox token")
	}
	for name, bad := range map[string]VolumeClaims{"no volume": {Project: c.Project}, "no project": {Volume: c.Volume}} {
		if _, err := tk.issuer.IssueVolume(bad); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}
