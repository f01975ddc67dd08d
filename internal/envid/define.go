package envid

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	goruntime "runtime"

	"github.com/airlockdev/airlock/internal/runtime"
)

// HostPlatform is the platform this binary runs on.
func HostPlatform() Platform { return Platform{OS: goruntime.GOOS, Arch: goruntime.GOARCH} }

// Inputs are what a Definition is built from besides the runtime's Info.
type Inputs struct {
	// BinaryDigest is the SHA-256 of the runtime binary (DigestFile of
	// Info.Binary).
	BinaryDigest Digest
	// Host is the node's platform; the zero value: HostPlatform.
	Host Platform
	// Guest is the sandboxes' platform; the zero value: Host (containers
	// run the host's architecture).
	Guest Platform
	// Boot is what a VM boots; empty for OCI runtimes.
	Boot Boot
	// SnapshotFormat is the runtime's name of its snapshot layout, if it
	// has one.
	SnapshotFormat string
}

// FromInfo builds the definition of environment name run by the runtime
// described by info.
func FromInfo(name Name, info runtime.Info, in Inputs) (Definition, error) {
	host := in.Host
	if host == (Platform{}) {
		host = HostPlatform()
	}
	guest := in.Guest
	if guest == (Platform{}) {
		guest = host
	}
	d := Definition{
		SchemaVersion: SchemaVersion,
		Name:          name,
		Host:          host,
		Runtime: RuntimeBinding{
			Name:         info.Name,
			Version:      info.Version,
			BinaryDigest: in.BinaryDigest,
		},
		Guest:     guest,
		Boot:      in.Boot,
		Isolation: info.Isolation,
		Snapshot: Snapshot{
			Capability: SnapshotCapabilityOf(info.Capabilities),
			Format:     in.SnapshotFormat,
		},
		OOMScope: info.OOMScope,
	}
	if err := d.Validate(); err != nil {
		return Definition{}, fmt.Errorf("environment %s: %w", name, err)
	}
	return d, nil
}

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
