package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
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
// exists it does nothing and returns false. A key already in the file
// (written by an operator) is imported instead of a new one made.
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
	id, hash, imported, replaced, err := adminKeyFrom(path)
	if err != nil {
		return false, err
	}
	if replaced {
		logger.WarnContext(ctx, "the admin key file held no API key; a new key was written over it", "file", path)
	}
	key := model.APIKey{
		ID: id, ProjectID: project.ID, Role: model.RoleAdmin, Name: "bootstrap admin",
		SecretHash: hash, CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	if err := st.CreateAPIKey(ctx, key, nil); errors.Is(err, store.ErrAlreadyExists) && imported {
		return false, nil // another process sharing the database imported the same file first
	} else if err != nil {
		return false, fmt.Errorf("create admin key: %w", err)
	}
	if imported {
		logger.InfoContext(ctx, "imported the first admin API key", "key", id, "project", project.ID, "file", path)
	} else {
		logger.InfoContext(ctx, "created the first admin API key", "key", id, "project", project.ID, "file", path)
	}
	return true, nil
}

// adminKeyFrom reads the admin key in path if the file holds one (an
// operator's, e.g. from a Kubernetes Secret, or one written before a crash:
// imported), else makes one and writes it there (atomically, before the key is inserted, so a crash never
// leaves a key that nobody holds).
func adminKeyFrom(path string) (id model.APIKeyID, hash []byte, imported, replaced bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		// A file that holds no key (a stale one of a crash mid-write) is
		// replaced below.
		if id, secret, err := auth.ParseAPIKey(strings.TrimSpace(string(b))); err == nil {
			return id, auth.HashSecret(secret), true, false, nil
		}
		replaced = len(b) > 0
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, false, false, fmt.Errorf("read admin key file: %w", err)
	}
	token, id, hash := auth.GenerateAPIKey()
	if err := atomicfile.Write(path, []byte(token+"\n"), 0o600); err != nil {
		return "", nil, false, false, fmt.Errorf("write admin key file: %w", err)
	}
	return id, hash, false, replaced, nil
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
