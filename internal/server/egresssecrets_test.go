package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// secretsStore answers the two reads a secretSource makes.
type secretsStore struct {
	store.Store
	sandboxes map[model.SandboxID]model.ProjectID
	secrets   map[model.ProjectID][]model.SealedSecret
}

func (s *secretsStore) GetSandboxByID(_ context.Context, id model.SandboxID) (model.Sandbox, error) {
	p, ok := s.sandboxes[id]
	if !ok {
		return model.Sandbox{}, store.ErrNotFound
	}
	return model.Sandbox{ID: id, ProjectID: p}, nil
}

func (s *secretsStore) ListSecrets(_ context.Context, p model.ProjectID) ([]model.SealedSecret, error) {
	return s.secrets[p], nil
}

// TestSecretSourceHeaderRules: a sandbox's header rules resolve their
// placeholders from the sandbox's own project only (another project's
// secret of the name asked for is never used: the rule refuses instead),
// and rules sealed for another project do not open.
func TestSecretSourceHeaderRules(t *testing.T) {
	sealer, err := secrets.NewSealer(bytes.Repeat([]byte{3}, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	const (
		mine   model.ProjectID = "prj_mine"
		theirs model.ProjectID = "prj_theirs"
	)
	rec := func(p model.ProjectID, name, value string, hosts ...string) model.SealedSecret {
		hs, err := secrets.ParseHosts(append(hosts, "unused.example.com")[:max(len(hosts), 1)])
		if err != nil {
			t.Fatal(err)
		}
		if len(hosts) == 0 {
			hs = nil
		}
		return sealer.Record(secrets.Secret{Project: p, Name: secrets.Name(name), Hosts: hs, Header: "Authorization", Format: "Bearer {value}", Value: secrets.Value(value)})
	}
	st := &secretsStore{
		sandboxes: map[model.SandboxID]model.ProjectID{"sbx_mine": mine, "sbx_theirs": theirs},
		secrets: map[model.ProjectID][]model.SealedSecret{
			mine:   {rec(mine, "key", "my-value"), rec(mine, "proj", "project-wide", "api.example.com")},
			theirs: {rec(theirs, "other", "their-value")},
		},
	}
	seal := func(p model.ProjectID, headers map[string]string) *policy.Headers {
		rules, err := secrets.ParseHeaderRules([]secrets.RawHeaderRule{{Host: "api.example.com", Headers: headers}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := sealer.SealHeaderRules(p, rules)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	headers := map[model.SandboxID]*policy.Headers{
		"sbx_mine":   seal(mine, map[string]string{"X-Mine": "k=${secrets.key}", "X-Theirs": "${secrets.other}", "X-Static": "s"}),
		"sbx_theirs": seal(mine, map[string]string{"X-Moved": "${secrets.other}"}), // sealed for another project
	}
	src := newSecretSource(st, sealer, slog.New(slog.NewTextHandler(io.Discard, nil)))
	src.headers = func(id model.SandboxID) *policy.Headers { return headers[id] }

	got := map[string]string{}
	refused := map[string]string{}
	for _, s := range src.SecretsFor("sbx_mine") {
		if strings.Contains(s.Value, "their-value") {
			t.Fatalf("another project's secret resolved: %v", s)
		}
		if s.Refuse != "" {
			refused[s.Header] = s.Refuse
			continue
		}
		got[s.Header] = s.Value
	}
	if got["X-Mine"] != "k=my-value" || got["X-Static"] != "s" || got["Authorization"] != "Bearer project-wide" {
		t.Fatalf("resolved %v", got)
	}
	if _, ok := got["X-Theirs"]; ok || !strings.Contains(refused["X-Theirs"], "no secret other") {
		t.Fatalf("X-Theirs: got %q, refused %q", got["X-Theirs"], refused["X-Theirs"])
	}
	// A secret with no hosts is used only through placeholders.
	for _, s := range src.SecretsFor("sbx_mine") {
		if s.Value == "Bearer my-value" {
			t.Fatalf("a host-less secret injected by itself: %v", s)
		}
	}
	for _, s := range src.SecretsFor("sbx_theirs") {
		if s.Header == "X-Moved" {
			t.Fatalf("rules sealed for another project opened: %v", s)
		}
	}
}
