package template

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// ImageSource is where an OCI image is read from.
type ImageSource uint8

// Image sources.
const (
	// ImageRegistry: a registry reference, "registry/repo:tag" or
	// "registry/repo@sha256:…" (Docker Hub and the tag "latest" are the
	// defaults, as with docker pull).
	ImageRegistry ImageSource = iota + 1
	// ImageOCILayout: "oci-layout:DIR", an OCI image layout directory.
	ImageOCILayout
	// ImageDockerArchive: "docker-archive:FILE", a `docker save` tarball
	// holding one image.
	ImageDockerArchive
)

// Prefixes of the image reference forms that name a local path.
const (
	ociLayoutPrefix     = "oci-layout:"
	dockerArchivePrefix = "docker-archive:"
	dockerPrefix        = "docker://" // optional before a registry reference
	maxImageRefLen      = 4096
)

// HasRegistryHost reports whether the first component of a registry
// reference s names a registry host, as docker decides it: it holds a "."
// or ":", or is "localhost" (and is not "." or "..", which name local
// paths). Without one, docker would read s as a Docker Hub repository.
func HasRegistryHost(s string) bool {
	host, _, ok := strings.Cut(s, "/")
	return ok && host != "." && host != ".." && (strings.ContainsAny(host, ".:") || host == "localhost")
}

// IsImageRefForm reports whether s starts with one of the prefixes that
// make it an image reference whatever follows: "docker://", "oci-layout:"
// or "docker-archive:".
func IsImageRefForm(s string) bool {
	for _, p := range []string{dockerPrefix, ociLayoutPrefix, dockerArchivePrefix} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func (k ImageSource) String() string {
	switch k {
	case ImageRegistry:
		return "registry"
	case ImageOCILayout:
		return "oci-layout"
	case ImageDockerArchive:
		return "docker-archive"
	}
	return fmt.Sprintf("ImageSource(%d)", uint8(k))
}

// ImageRef names an OCI image to import: a registry reference, an OCI
// image layout directory or a `docker save` tarball. The zero value is not a
// reference; make one with ParseImageRef.
type ImageRef struct {
	source ImageSource
	path   string         // ImageOCILayout, ImageDockerArchive: a cleaned host path
	ref    name.Reference // ImageRegistry
}

// ParseImageRef parses an image reference: "oci-layout:DIR",
// "docker-archive:FILE.tar", or a registry reference ("registry/repo:tag",
// "registry/repo@sha256:…", optionally prefixed with "docker://").
func ParseImageRef(s string) (ImageRef, error) {
	if s == "" {
		return ImageRef{}, fmt.Errorf("%w: empty image reference", model.ErrInvalid)
	}
	if len(s) > maxImageRefLen || strings.IndexByte(s, 0) >= 0 {
		return ImageRef{}, fmt.Errorf("%w: image reference %q is longer than %d bytes or contains a NUL byte", model.ErrInvalid, textclip.Bytes(s, maxEcho), maxImageRefLen)
	}
	for _, p := range []struct {
		prefix string
		source ImageSource
	}{{ociLayoutPrefix, ImageOCILayout}, {dockerArchivePrefix, ImageDockerArchive}} {
		loc, ok := strings.CutPrefix(s, p.prefix)
		if !ok {
			continue
		}
		if loc == "" {
			return ImageRef{}, fmt.Errorf("%w: image reference %q names no path after %q", model.ErrInvalid, s, p.prefix)
		}
		return ImageRef{source: p.source, path: filepath.Clean(loc)}, nil
	}
	// Other skopeo/containers-image transports are not supported; without
	// this "oci:dir" would parse as the Docker Hub image "oci", tag "dir".
	for _, t := range []string{"oci:", "oci-archive:", "docker-daemon:", "containers-storage:", "dir:", "ostree:", "sif:"} {
		if strings.HasPrefix(s, t) {
			return ImageRef{}, fmt.Errorf("%w: image reference %q: unsupported transport; use registry/repo:tag, %sDIR or %sFILE.tar",
				model.ErrInvalid, textclip.Bytes(s, maxEcho), ociLayoutPrefix, dockerArchivePrefix)
		}
	}
	loc := strings.TrimPrefix(s, dockerPrefix)
	ref, err := name.ParseReference(loc)
	if err != nil {
		return ImageRef{}, fmt.Errorf("%w: image reference %q: %v", model.ErrInvalid, textclip.Bytes(s, maxEcho), err)
	}
	// go-containerregistry accepts repositories such as "/abs/path" or
	// "a/../b"; hold them to the distribution spec's grammar.
	if repo := ref.Context().RepositoryStr(); !validRepository(repo) {
		return ImageRef{}, fmt.Errorf("%w: image reference %q: repository %q is not lower-case components separated by single slashes",
			model.ErrInvalid, textclip.Bytes(s, maxEcho), textclip.Bytes(repo, maxEcho))
	}
	return ImageRef{source: ImageRegistry, ref: ref}, nil
}

// validRepository reports whether repo follows the distribution spec:
// components of [a-z0-9]+ joined by ".", "_", "__" or dashes, separated by
// single slashes.
func validRepository(repo string) bool {
	if repo == "" {
		return false
	}
	for comp := range strings.SplitSeq(repo, "/") {
		if !validRepoComponent(comp) {
			return false
		}
	}
	return true
}

func validRepoComponent(c string) bool {
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
	i := 0
	for {
		j := i
		for j < len(c) && alnum(c[j]) {
			j++
		}
		if j == i {
			return false
		}
		if j == len(c) {
			return true
		}
		k := j
		for k < len(c) && !alnum(c[k]) {
			k++
		}
		if sep := c[j:k]; sep != "." && sep != "_" && sep != "__" && strings.Trim(sep, "-") != "" {
			return false
		}
		i = k
	}
}

// Source says where the image is read from.
func (r ImageRef) Source() ImageSource { return r.source }

// Path is the host path of an ImageOCILayout or ImageDockerArchive
// reference, "" for a registry reference.
func (r ImageRef) Path() string { return r.path }

// Registry returns the registry host of a registry reference
// ("index.docker.io" for Docker Hub), "" for the other sources.
func (r ImageRef) Registry() string {
	if r.source != ImageRegistry {
		return ""
	}
	return r.ref.Context().RegistryStr()
}

// String returns the reference in a form ParseImageRef accepts and that
// names the same image; registry references are fully qualified
// ("index.docker.io/library/alpine:latest").
func (r ImageRef) String() string {
	switch r.source {
	case ImageRegistry:
		return r.ref.Name()
	case ImageOCILayout:
		return ociLayoutPrefix + r.path
	case ImageDockerArchive:
		return dockerArchivePrefix + r.path
	}
	return ""
}
