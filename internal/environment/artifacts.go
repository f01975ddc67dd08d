package environment

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
)

// Errors of the three separate checks before a sandbox may run in an
// environment (decodable is not executable).
var (
	// ErrUnknown: no definition with that reference or name is known.
	ErrUnknown = errors.New("unknown execution environment")
	// ErrArtifactsMissing: the definition is known but this node's
	// artifacts no longer match it (binary gone, or its digest changed).
	ErrArtifactsMissing = errors.New("execution environment's artifacts are missing")
	// ErrUnavailable: the environment's artifacts are there but no node
	// enabled it and ran its probe successfully.
	ErrUnavailable = errors.New("no healthy node runs the execution environment")
)

// HostPlatform is the platform this binary runs on.
func HostPlatform() Platform { return Platform{OS: goruntime.GOOS, Arch: goruntime.GOARCH} }

// DigestFile returns the SHA-256 digest of a file's content.
func DigestFile(path string) (Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest %s: %w", path, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return DigestOf(sum), nil
}

// Verify checks that the artifacts of d are still what it was defined
// from: the runtime binary at binary hashes to d's digest. It returns an
// error wrapping ErrArtifactsMissing otherwise.
func Verify(d Definition, binary string) error {
	dg, err := DigestFile(binary)
	if err != nil {
		return fmt.Errorf("%w: environment %s: %w", ErrArtifactsMissing, d.Name, err)
	}
	if dg != d.Runtime.BinaryDigest {
		return fmt.Errorf("%w: environment %s: runtime binary %s is %s, the definition says %s", ErrArtifactsMissing, d.Name, binary, dg, d.Runtime.BinaryDigest)
	}
	return nil
}
