package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
)

// Files and directories inside the data dir. admin.key and server.url are a
// contract with the CLI and the docs.
const (
	adminKeyFile  = "admin.key"
	serverURLFile = "server.url"
	lockFile      = "lock"
	nodeIDFile    = "node-id"
	sqliteFile    = "airlock.db"
	templatesDir  = "templates"
	runtimeDir    = "runtime"
	attachKeysDir = "keys/attach" // attachment-token signing keys, one 0600 file per key
)

// dataDir is an opened, locked data directory.
type dataDir struct {
	path string
	lock *os.File
}

// openDataDir creates the directory if needed (mode 0700) and takes an
// exclusive lock on it, so two servers never share one data dir: that is what
// lets a starting server treat leases in its node's name as its own.
func openDataDir(path string) (*dataDir, error) {
	if path == "" {
		return nil, errors.New("--data-dir is required")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", path, err)
	}
	// Resolve symlinks: runc needs a real path for its state root.
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.OpenFile(filepath.Join(abs, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another airlock server", abs)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	for _, d := range []string{templatesDir, runtimeDir} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o700); err != nil {
			f.Close()
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	return &dataDir{path: abs, lock: f}, nil
}

func (d *dataDir) join(elem ...string) string {
	return filepath.Join(append([]string{d.path}, elem...)...)
}

func (d *dataDir) close() error { return d.lock.Close() }

// nodeID reads the node's persistent ID, creating it on first start.
func (d *dataDir) nodeID() (model.NodeID, error) {
	p := d.join(nodeIDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		return model.ParseNodeID(strings.TrimSpace(string(b)))
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node ID: %w", err)
	}
	id := model.NewNodeID()
	if err := atomicfile.Write(p, []byte(id.String()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write node ID: %w", err)
	}
	return id, nil
}
