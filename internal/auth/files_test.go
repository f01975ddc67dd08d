package auth

import "testing"

func TestKindOfFilesToken(t *testing.T) {
	t.Parallel()
	for tok, want := range map[string]TokenKind{
		"alf_eyJzIjoi.c2ln": KindFiles,
		"alt_abc":           KindAttachment,
		"alk_abc":           KindAPIKey,
		"alx_abc":           KindUnknown,
	} {
		if got := KindOf(tok); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", tok, got, want)
		}
	}
	if KindFiles.String() != "file transfer token" {
		t.Errorf("KindFiles.String() = %q", KindFiles.String())
	}
}
