package template

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// ManifestSchemaVersion is the version of the manifest format written by this
// package. A template's digest covers it, so bumping it changes every digest.
const ManifestSchemaVersion = 1

// Bounds on a manifest's runtime configuration.
const (
	maxConfigEnv    = 1024
	maxConfigEnvLen = 32 * 1024
	maxManifestSize = 4 << 20
)

// Manifest describes a template. Its canonical JSON encoding (Encode) is what
// the template digest hashes: keys sorted, no insignificant whitespace, no
// HTML escaping. Field order below is the sorted order of the JSON keys, which
// encoding/json preserves.
type Manifest struct {
	Config        Config     `json:"config"`
	Rootfs        RootfsInfo `json:"rootfs"`
	SchemaVersion int        `json:"schema_version"`
}

// Config is the runtime configuration a sandbox of the template starts with.
//
// Cmd, Entrypoint and User come from OCI image configs. They are omitted
// from the encoding when empty, so manifests without them (every template
// imported from a directory or tar archive, and the default template) keep
// the bytes, and so the digests, they had before these fields existed.
// Sandboxes use Env, WorkingDir and User as their defaults (see Defaults);
// Entrypoint and Cmd are recorded for later use and change nothing yet.
//
// StartCmd, ReadyCmd and ReadyTimeoutMS (omitted when empty, so older
// manifests keep their bytes) are the template's start and ready commands
// (startcmd.go): a sandbox of the template starts StartCmd in the
// background and is running only once ReadyCmd exits 0.
type Config struct {
	// Cmd is the image's default command (arguments to Entrypoint, if any).
	Cmd []string `json:"cmd,omitempty"`
	// Entrypoint is the image's entrypoint.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Env is the environment as KEY=VALUE strings, in order.
	Env []string `json:"env"`
	// ReadyCmd is a shell command run (again every 200 ms) until it exits
	// 0: the sandbox is ready then. Empty: ready once StartCmd started.
	ReadyCmd string `json:"ready_cmd,omitempty"`
	// ReadyTimeoutMS bounds the wait for ReadyCmd; 0: DefaultReadyTimeout.
	ReadyTimeoutMS int64 `json:"ready_timeout_ms,omitempty"`
	// StartCmd is a shell command started in the background, as the
	// template's user in its working directory, when a sandbox starts
	// afresh (not when it resumes with its memory).
	StartCmd string `json:"start_cmd,omitempty"`
	// User is the image's user as written there: "uid", "uid:gid", "name"
	// or "name:group", resolved against the template's /etc files later.
	User string `json:"user,omitempty"`
	// WorkingDir is the absolute working directory inside the sandbox.
	WorkingDir string `json:"working_dir"`
}

// RootfsInfo identifies the root filesystem tree.
type RootfsInfo struct {
	// Digest is "sha256:<hex>" of the tree (see the tree digest format in tree.go).
	Digest string `json:"digest"`
	// Entries counts the tree's entries, the root directory included.
	Entries int `json:"entries"`
	// SizeBytes is the total size of its regular files, each inode counted once.
	SizeBytes int64 `json:"size_bytes"`
}

// DefaultConfig is the runtime configuration given to imported templates.
func DefaultConfig() Config {
	return Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
	}
}

// Encode returns the canonical JSON encoding of m after checking it.
func (m Manifest) Encode() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	if m.Config.Env == nil {
		m.Config.Env = []string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Digest returns the template digest of the canonical encoding of m.
func (m Manifest) Digest() (model.TemplateDigest, error) {
	b, err := m.Encode()
	if err != nil {
		return "", err
	}
	return manifestDigest(b), nil
}

// ParseManifest parses a manifest and accepts it only in its canonical
// encoding, so that the bytes and the digest they hash to are one-to-one.
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > maxManifestSize {
		return Manifest{}, fmt.Errorf("%w: manifest is larger than %d bytes", model.ErrInvalid, maxManifestSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %v", model.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("%w: manifest has data after the JSON object", model.ErrInvalid)
	}
	canon, err := m.Encode()
	if err != nil {
		return Manifest{}, err
	}
	if !bytes.Equal(canon, b) {
		return Manifest{}, fmt.Errorf("%w: manifest is not in canonical form", model.ErrInvalid)
	}
	return m, nil
}

func (m Manifest) validate() error {
	if m.SchemaVersion != ManifestSchemaVersion {
		return fmt.Errorf("%w: manifest schema_version %d is not supported (want %d)", model.ErrInvalid, m.SchemaVersion, ManifestSchemaVersion)
	}
	if err := validSHA256Ref(m.Rootfs.Digest); err != nil {
		return fmt.Errorf("%w: manifest rootfs.digest: %v", model.ErrInvalid, err)
	}
	if m.Rootfs.Entries < 1 {
		return fmt.Errorf("%w: manifest rootfs.entries must be at least 1", model.ErrInvalid)
	}
	if m.Rootfs.SizeBytes < 0 {
		return fmt.Errorf("%w: manifest rootfs.size_bytes is negative", model.ErrInvalid)
	}
	return m.Config.validate()
}

func (c Config) validate() error {
	if len(c.Env) > maxConfigEnv {
		return fmt.Errorf("%w: manifest config.env has more than %d entries", model.ErrInvalid, maxConfigEnv)
	}
	for _, kv := range c.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || len(kv) > maxConfigEnvLen || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("%w: manifest config.env entry %q must be NAME=VALUE", model.ErrInvalid, textclip.Bytes(kv, maxEcho))
		}
	}
	wd := c.WorkingDir
	if !path.IsAbs(wd) || path.Clean(wd) != wd || strings.ContainsRune(wd, 0) {
		return fmt.Errorf("%w: manifest config.working_dir %q must be a clean absolute path", model.ErrInvalid, textclip.Bytes(wd, maxEcho))
	}
	return c.validateProcess()
}

func validSHA256Ref(s string) error {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		return fmt.Errorf("%q must be sha256:<64 lower-case hex characters>", textclip.Bytes(s, maxEcho))
	}
	if _, err := hex.DecodeString(h); err != nil {
		return fmt.Errorf("%q is not hex", textclip.Bytes(s, maxEcho))
	}
	return nil
}

// maxEcho is how many bytes of a value an error message quotes (textclip.Bytes).
const maxEcho = 80
