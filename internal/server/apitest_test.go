package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// newTestAPI is the real API over a SQLite store in a data dir of the
// test's own, as the server opens them: cfg with its Store, Attach and
// Logger filled in. It returns the API and the admin key; everything is
// closed when the test ends.
func newTestAPI(t *testing.T, cfg api.Config) (*api.API, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dd, err := openDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dd.close() })
	log := slog.New(slog.DiscardHandler)
	keys, err := openAttachKeys(dd, DefaultAttachKeyMaxAge, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Store, cfg.Attach, cfg.Logger = st, keys.Issuer(), log
	a, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.EnsureAdminKey(ctx, st, dd.join(adminKeyFile), log); err != nil {
		t.Fatal(err)
	}
	adminKey, err := os.ReadFile(dd.join(adminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return a, strings.TrimSpace(string(adminKey))
}
