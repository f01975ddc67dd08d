package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// DefaultProjectName is the project EnsureAdminKey creates the first admin key in.
const DefaultProjectName = "default"

// EnsureAdminKey gives a fresh installation its first credential. If the
// store has no API keys at all, it creates the project "default" (unless it
// exists) and an admin key in it, writes the key's token (one line) to path
// with mode 0600 and logs where it is. The file is written atomically and
// before the key is inserted, so a crash never leaves a key that nobody
// holds: the next start finds no key and writes a new file. If any key
// exists it does nothing and returns false.
func EnsureAdminKey(ctx context.Context, st store.Store, path string, logger *slog.Logger) (created bool, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	n, err := st.CountAPIKeys(ctx)
	if err != nil {
		return false, fmt.Errorf("count API keys: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	project, err := ensureProject(ctx, st, DefaultProjectName)
	if err != nil {
		return false, err
	}
	token, id, hash := auth.GenerateAPIKey()
	if err := writeSecretFile(path, []byte(token+"\n")); err != nil {
		return false, fmt.Errorf("write admin key file: %w", err)
	}
	key := model.APIKey{
		ID: id, ProjectID: project.ID, Role: model.RoleAdmin, Name: "bootstrap admin",
		SecretHash: hash, CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	if err := st.CreateAPIKey(ctx, key, nil); err != nil {
		return false, fmt.Errorf("create admin key: %w", err)
	}
	logger.InfoContext(ctx, "created the first admin API key", "key", id, "project", project.ID, "file", path)
	return true, nil
}

// ensureProject returns the project with the given name, creating it if missing.
func ensureProject(ctx context.Context, st store.Store, name string) (model.Project, error) {
	for attempt := 0; attempt < 2; attempt++ {
		ps, err := st.ListProjects(ctx)
		if err != nil {
			return model.Project{}, fmt.Errorf("list projects: %w", err)
		}
		for _, p := range ps {
			if p.Name == name {
				return p, nil
			}
		}
		p := model.Project{ID: model.NewProjectID(), Name: name, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		err = st.CreateProject(ctx, p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, store.ErrAlreadyExists) {
			return model.Project{}, fmt.Errorf("create project %q: %w", name, err)
		}
		// Created concurrently: read it on the next pass.
	}
	return model.Project{}, fmt.Errorf("create project %q: it exists but cannot be listed", name)
}

// writeSecretFile replaces path atomically with a 0600 file holding data:
// a temporary file in the same directory is written, synced and renamed
// over path, and the directory is synced.
func writeSecretFile(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil { // CreateTemp makes 0600; be explicit
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
