package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

// TestFileTokenUser: the user a transfer runs as is a signed claim: it
// round-trips, and a token whose user was changed does not verify.
func TestFileTokenUser(t *testing.T) {
	tk := newTestKeys(t)
	c := tk.fileClaims()
	c.User = &model.UserIDs{UID: 1000, GID: 1001}
	tok := tk.issueFile(t, c)
	got, err := tk.verifier.VerifyFile(tok, tk.now)
	if err != nil {
		t.Fatal(err)
	}
	if got.User == nil || *got.User != *c.User {
		t.Fatalf("user = %v, want %v", got.User, c.User)
	}
	// Without a user, none comes back.
	plain, err := tk.verifier.VerifyFile(tk.issueFile(t, tk.fileClaims()), tk.now)
	if err != nil || plain.User != nil {
		t.Fatalf("no-user token: user %v, %v", plain.User, err)
	}

	parts := strings.Split(strings.TrimPrefix(tok, FilesTokenPrefix), ".")
	withUser := func(u any) jwt.MapClaims {
		p := tk.fileWire(c)
		if u != nil {
			p["user"] = u
		}
		return p
	}
	cases := []struct {
		name  string
		token string
	}{
		{"user removed, old signature", FilesTokenPrefix + parts[0] + "." + b64(withUser(nil)) + "." + parts[2]},
		{"user changed to root, old signature", FilesTokenPrefix + parts[0] + "." + b64(withUser(map[string]any{"uid": 0, "gid": 0})) + "." + parts[2]},
		{"signed, uid out of range", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withUser(map[string]any{"uid": -1, "gid": 0}))},
		{"signed, gid out of range", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withUser(map[string]any{"uid": 1, "gid": 1 << 40}))},
		{"signed, user not an object", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withUser("1000:1000"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tk.verifier.VerifyFile(tc.token, tk.now)
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("VerifyFile = %+v, %v; want ErrInvalidToken", got, err)
			}
		})
	}

	bad := tk.fileClaims()
	bad.User = &model.UserIDs{UID: 1 << 31, GID: 0}
	if tok, err := tk.issuer.IssueFile(bad); err == nil {
		t.Fatalf("issued a token for user %v: %s", bad.User, tok)
	}
}
