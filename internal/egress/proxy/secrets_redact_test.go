package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestSecretRedacted: no way of printing or logging a Secret shows its value.
func TestSecretRedacted(t *testing.T) {
	const value = "Bearer sk-very-secret-value"
	s := Secret{Name: "OPENAI", Hosts: []string{"api.test"}, Header: "Authorization", Value: value, Placeholder: "airlock-secret:OPENAI"}
	logged := func(h func(*bytes.Buffer) slog.Handler, args ...any) string {
		var b bytes.Buffer
		slog.New(h(&b)).Info("m", args...)
		return b.String()
	}
	text := func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }
	jsonH := func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, out string }{
		{"%v", fmt.Sprintf("%v", s)},
		{"%+v", fmt.Sprintf("%+v", s)},
		{"%#v", fmt.Sprintf("%#v", s)},
		{"%s", fmt.Sprintf("%s", s)},
		{"%q", fmt.Sprintf("%q", s)},
		{"%x", fmt.Sprintf("%x", s)},
		{"pointer %+v", fmt.Sprintf("%+v", &s)},
		{"slice %#v", fmt.Sprintf("%#v", []Secret{s})},
		{"Sprint", fmt.Sprint(s)},
		{"json", string(js)},
		{"slog text", logged(text, "secret", s)},
		{"slog json", logged(jsonH, "secret", s)},
		{"slog text slice", logged(text, "secrets", []Secret{s})},
		{"slog json slice", logged(jsonH, "secrets", []Secret{s})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.out, "sk-very-secret") {
				t.Fatalf("the value leaked: %s", tc.out)
			}
			if !strings.Contains(tc.out, "OPENAI") {
				t.Fatalf("the secret's name is missing: %s", tc.out)
			}
		})
	}
}
