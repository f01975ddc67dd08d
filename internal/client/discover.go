package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files that `airlock server` writes into its data dir for local clients.
const (
	ServerURLFile = "server.url" // one line: the server's base URL, e.g. http://127.0.0.1:7070
	AdminKeyFile  = "admin.key"  // the first admin API key (mode 0600)
)

// Environment variables read by Discover and ResolveDataDir.
const (
	EnvURL     = "AIRLOCK_URL"
	EnvAPIKey  = "AIRLOCK_API_KEY"
	EnvDataDir = "AIRLOCK_DATA_DIR"
)

// DefaultDataDir returns the data dir used when neither --data-dir nor
// AIRLOCK_DATA_DIR is given: /var/lib/airlock for root, otherwise
// $XDG_DATA_HOME/airlock or ~/.local/share/airlock.
func DefaultDataDir() (string, error) {
	return defaultDataDir(os.Geteuid(), os.Getenv, os.UserHomeDir)
}

func defaultDataDir(euid int, getenv func(string) string, home func() (string, error)) (string, error) {
	if euid == 0 {
		return "/var/lib/airlock", nil
	}
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "airlock"), nil
	}
	h, err := home()
	if err != nil {
		return "", fmt.Errorf("no default data dir (set --data-dir or %s): %w", EnvDataDir, err)
	}
	return filepath.Join(h, ".local", "share", "airlock"), nil
}

// ResolveDataDir picks the data dir: flag if non-empty, else $AIRLOCK_DATA_DIR,
// else DefaultDataDir. getenv nil means os.Getenv. Both `airlock server` and
// the client commands use it, so they agree on where server.url and
// admin.key live.
func ResolveDataDir(flag string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return resolveDataDir(flag, getenv, os.Geteuid(), os.UserHomeDir)
}

func resolveDataDir(flag string, getenv func(string) string, euid int, home func() (string, error)) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if d := getenv(EnvDataDir); d != "" {
		return d, nil
	}
	return defaultDataDir(euid, getenv, home)
}

// DiscoverOptions are the explicitly given values; empty means not given.
type DiscoverOptions struct {
	URL     string              // --url
	APIKey  string              // --api-key
	DataDir string              // --data-dir
	Getenv  func(string) string // nil: os.Getenv
}

// Target is where Discover found a server and a key.
type Target struct {
	URL        string
	APIKey     string
	URLFrom    string // "--url", "$AIRLOCK_URL" or the server.url path
	APIKeyFrom string // "--api-key", "$AIRLOCK_API_KEY" or the admin.key path
}

// Discover finds the server URL and API key. Each comes from its flag, else
// its environment variable, else the local data dir (flag, $AIRLOCK_DATA_DIR
// or DefaultDataDir), where `airlock server` writes server.url and admin.key.
//
// The data dir's admin key is used only for the server that wrote it: when
// the URL came from elsewhere and differs from server.url, Discover refuses
// rather than send the local admin key to some other server.
func Discover(o DiscoverOptions) (Target, error) {
	return discover(o, os.Geteuid(), os.UserHomeDir)
}

func discover(o DiscoverOptions, euid int, home func() (string, error)) (Target, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var t Target
	switch {
	case o.URL != "":
		t.URL, t.URLFrom = o.URL, "--url"
	case getenv(EnvURL) != "":
		t.URL, t.URLFrom = getenv(EnvURL), "$"+EnvURL
	}
	switch {
	case o.APIKey != "":
		t.APIKey, t.APIKeyFrom = o.APIKey, "--api-key"
	case getenv(EnvAPIKey) != "":
		t.APIKey, t.APIKeyFrom = getenv(EnvAPIKey), "$"+EnvAPIKey
	}
	if t.URL != "" && t.APIKey != "" {
		return t, nil
	}

	dir, dirErr := resolveDataDir(o.DataDir, getenv, euid, home)
	var localURL, urlPath string
	var urlErr error
	if dirErr == nil {
		urlPath = filepath.Join(dir, ServerURLFile)
		localURL, urlErr = readOneLine(urlPath)
	}
	if t.URL == "" && dirErr == nil && urlErr == nil {
		t.URL, t.URLFrom = localURL, urlPath
	}
	if t.URL == "" {
		return Target{}, noServerError(dirErr, urlErr)
	}
	if t.APIKey != "" {
		return t, nil
	}
	// The URL is known; only the key is missing.
	keyPath := filepath.Join(dir, AdminKeyFile)
	if dirErr != nil || urlErr != nil {
		return Target{}, noKeyError(t, fmt.Sprintf("the local data dir has no server (%v)", firstErr(dirErr, urlErr)))
	}
	if t.URLFrom != urlPath && !sameServer(t.URL, localURL) {
		return Target{}, noKeyError(t, fmt.Sprintf("%s belongs to the server at %s, not %s", keyPath, localURL, t.URL))
	}
	key, err := readOneLine(keyPath)
	if err != nil {
		return Target{}, noKeyError(t, err.Error())
	}
	t.APIKey, t.APIKeyFrom = key, keyPath
	return t, nil
}

// readOneLine reads a small file holding one value.
func readOneLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("%s does not exist", path)
		case errors.Is(err, fs.ErrPermission):
			return "", fmt.Errorf("cannot read %s: permission denied (run as its owner, or pass the value explicitly)", path)
		}
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.ContainsAny(v, "\r\n") {
		return "", fmt.Errorf("%s must hold exactly one non-empty line", path)
	}
	return v, nil
}

func sameServer(a, b string) bool {
	return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func noServerError(dirErr, urlErr error) error {
	local := ""
	switch {
	case dirErr != nil:
		local = dirErr.Error()
	default:
		local = fmt.Sprintf("no local `airlock server` found: %v", urlErr)
	}
	return fmt.Errorf("no Airlock server configured: pass --url and --api-key, set %s and %s, "+
		"or point --data-dir / %s at a local server's data dir (%s)", EnvURL, EnvAPIKey, EnvDataDir, local)
}

func noKeyError(t Target, why string) error {
	return fmt.Errorf("no API key for %s (from %s): pass --api-key, set %s, "+
		"or use the local server's data dir (%s)", t.URL, t.URLFrom, EnvAPIKey, why)
}
