package e2b

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestFileSignature(t *testing.T) {
	// Worked by hand: sha256("/home/user/a.txt:read::tok") in unpadded base64.
	got := fileSignature("/home/user/a.txt", opRead, "", "tok", "")
	if len(got) != len(signaturePrefix)+43 || got[:3] != "v1_" {
		t.Fatalf("signature %q: want v1_ + 43 characters", got)
	}
	now := time.Unix(1_800_000_000, 0)
	future := strconv.FormatInt(now.Unix()+60, 10)
	past := strconv.FormatInt(now.Unix()-1, 10)
	tests := []struct {
		name               string
		sig, exp, path, op string
		user, token        string
		ok                 bool
	}{
		{"valid", fileSignature("/a", opRead, "", "tok", ""), "", "/a", opRead, "", "tok", true},
		{"valid with user and expiry", fileSignature("/a", opWrite, "root", "tok", future), future, "/a", opWrite, "root", "tok", true},
		{"expired", fileSignature("/a", opRead, "", "tok", past), past, "/a", opRead, "", "tok", false},
		{"expired, other token", fileSignature("/a", opRead, "", "tok2", past), past, "/a", opRead, "", "tok", false},
		{"other path", fileSignature("/a", opRead, "", "tok", ""), "", "/b", opRead, "", "tok", false},
		{"read signature used to write", fileSignature("/a", opRead, "", "tok", ""), "", "/a", opWrite, "", "tok", false},
		{"other user", fileSignature("/a", opRead, "", "tok", ""), "", "/a", opRead, "root", "tok", false},
		{"other token", fileSignature("/a", opRead, "", "tok", ""), "", "/a", opRead, "", "tok2", false},
		{"expiry stripped", fileSignature("/a", opRead, "", "tok", future), "", "/a", opRead, "", "tok", false},
		{"expiry not a number", fileSignature("/a", opRead, "", "tok", "x"), "x", "/a", opRead, "", "tok", false},
		{"empty signature", "", "", "/a", opRead, "", "tok", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFileSignature(tc.sig, tc.exp, tc.path, tc.op, tc.user, tc.token, now)
			if tc.ok != (err == nil) {
				t.Fatalf("checkFileSignature = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, errBadSignature) {
				t.Fatalf("error %v does not wrap errBadSignature", err)
			}
			// Only a signature made with the token learns that it expired.
			if errors.Is(err, errSignatureExpired) != (tc.name == "expired") {
				t.Fatalf("error %v: expired = %v", err, errors.Is(err, errSignatureExpired))
			}
		})
	}
}
