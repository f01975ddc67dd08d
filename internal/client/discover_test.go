package client

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeDataDir(t *testing.T, url, key string) string {
	t.Helper()
	dir := t.TempDir()
	if url != "" {
		if err := os.WriteFile(filepath.Join(dir, ServerURLFile), []byte(url+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if key != "" {
		if err := os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noHome() (string, error) { return "", errors.New("$HOME is not defined") }

func TestDiscoverPrecedence(t *testing.T) {
	local := writeDataDir(t, "http://127.0.0.1:7070", "key_local")
	envDir := writeDataDir(t, "http://127.0.0.1:8080", "key_envdir")
	empty := t.TempDir()
	tests := []struct {
		name             string
		opts             DiscoverOptions
		env              map[string]string
		wantURL, wantKey string
		wantURLFrom      string
		wantKeyFrom      string
		wantErr          string
	}{
		{name: "flags win over everything",
			opts:    DiscoverOptions{URL: "http://flag:1", APIKey: "key_flag", DataDir: local},
			env:     map[string]string{EnvURL: "http://env:1", EnvAPIKey: "key_env"},
			wantURL: "http://flag:1", wantKey: "key_flag", wantURLFrom: "--url", wantKeyFrom: "--api-key"},
		{name: "env over data dir",
			opts:    DiscoverOptions{DataDir: local},
			env:     map[string]string{EnvURL: "http://env:1", EnvAPIKey: "key_env"},
			wantURL: "http://env:1", wantKey: "key_env", wantURLFrom: "$AIRLOCK_URL", wantKeyFrom: "$AIRLOCK_API_KEY"},
		{name: "data dir from flag",
			opts:    DiscoverOptions{DataDir: local},
			env:     map[string]string{EnvDataDir: envDir},
			wantURL: "http://127.0.0.1:7070", wantKey: "key_local",
			wantURLFrom: filepath.Join(local, ServerURLFile), wantKeyFrom: filepath.Join(local, AdminKeyFile)},
		{name: "data dir from env",
			env:     map[string]string{EnvDataDir: envDir},
			wantURL: "http://127.0.0.1:8080", wantKey: "key_envdir",
			wantURLFrom: filepath.Join(envDir, ServerURLFile), wantKeyFrom: filepath.Join(envDir, AdminKeyFile)},
		{name: "flag key with local URL",
			opts:    DiscoverOptions{APIKey: "key_flag", DataDir: local},
			wantURL: "http://127.0.0.1:7070", wantKey: "key_flag",
			wantURLFrom: filepath.Join(local, ServerURLFile), wantKeyFrom: "--api-key"},
		{name: "env URL of the local server uses the local key",
			opts:    DiscoverOptions{DataDir: local},
			env:     map[string]string{EnvURL: "http://127.0.0.1:7070/"},
			wantURL: "http://127.0.0.1:7070/", wantKey: "key_local",
			wantURLFrom: "$AIRLOCK_URL", wantKeyFrom: filepath.Join(local, AdminKeyFile)},
		{name: "local key never goes to another server",
			opts:    DiscoverOptions{URL: "https://remote.example", DataDir: local},
			wantErr: "belongs to the server at http://127.0.0.1:7070, not https://remote.example"},
		{name: "URL without any key",
			opts:    DiscoverOptions{URL: "https://remote.example", DataDir: empty},
			wantErr: "no API key for https://remote.example (from --url): pass --api-key, set AIRLOCK_API_KEY"},
		{name: "nothing anywhere names all three sources",
			opts:    DiscoverOptions{DataDir: empty},
			wantErr: "pass --url and --api-key, set AIRLOCK_URL and AIRLOCK_API_KEY, or point --data-dir / AIRLOCK_DATA_DIR"},
		{name: "no home and not root",
			wantErr: "$HOME is not defined"},
		{name: "server.url without admin.key",
			opts:    DiscoverOptions{DataDir: writeDataDir(t, "http://127.0.0.1:9", "")},
			wantErr: "admin.key does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Getenv = envMap(tt.env)
			got, err := discover(o, 1000, noHome)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Target{URL: tt.wantURL, APIKey: tt.wantKey, URLFrom: tt.wantURLFrom, APIKeyFrom: tt.wantKeyFrom}
			if got != want {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestDiscoverBadFiles(t *testing.T) {
	dir := writeDataDir(t, "http://a\nhttp://b", "k")
	if _, err := discover(DiscoverOptions{DataDir: dir, Getenv: envMap(nil)}, 1000, noHome); err == nil || !strings.Contains(err.Error(), "exactly one non-empty line") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultDataDir(t *testing.T) {
	home := func() (string, error) { return "/home/u", nil }
	tests := []struct {
		euid int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"XDG_DATA_HOME": "/x"}, "/var/lib/airlock"},
		{1000, map[string]string{"XDG_DATA_HOME": "/x/data"}, "/x/data/airlock"},
		{1000, map[string]string{"XDG_DATA_HOME": "relative"}, "/home/u/.local/share/airlock"},
		{1000, nil, "/home/u/.local/share/airlock"},
	}
	for _, tt := range tests {
		got, err := defaultDataDir(tt.euid, envMap(tt.env), home)
		if err != nil || got != tt.want {
			t.Errorf("euid %d env %v: %q, %v; want %q", tt.euid, tt.env, got, err, tt.want)
		}
	}
	got, err := resolveDataDir("", envMap(map[string]string{EnvDataDir: "/e"}), 1000, home)
	if err != nil || got != "/e" {
		t.Errorf("env data dir: %q, %v", got, err)
	}
	got, err = resolveDataDir("/f", envMap(map[string]string{EnvDataDir: "/e"}), 1000, home)
	if err != nil || got != "/f" {
		t.Errorf("flag data dir: %q, %v", got, err)
	}
}
