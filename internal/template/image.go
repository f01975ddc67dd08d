package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Bounds on an image.
const (
	maxImageLayers = 256 // overlayfs-based runtimes stop far below this
	maxIndexDepth  = 4   // nested image indexes followed to find a platform
	// maxImageConfig bounds an image config blob, read into memory whole
	// (go-containerregistry bounds manifests itself, to 100 MiB).
	maxImageConfig = 16 << 20
)

// ImageOptions configure reading an image from a registry.
type ImageOptions struct {
	// Insecure allows plain HTTP to a registry that is not on a loopback
	// address. Without it only loopback registries (localhost, 127.0.0.0/8,
	// ::1) may be reached over HTTP; go-containerregistry would otherwise
	// also fall back to HTTP for private (RFC 1918) and *.local addresses.
	Insecure bool
	// Transport carries registry requests; nil: remote.DefaultTransport.
	Transport http.RoundTripper
	// Keychain provides registry credentials; nil: anonymous access.
	Keychain authn.Keychain
}

// hostPlatform is the platform picked from multi-platform images.
func hostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// ImportImage imports the OCI image ref names: from a registry, an OCI
// image layout directory or a `docker save` tarball. A multi-platform image
// gives its linux image for this host's architecture. The layers are applied
// in order (whiteouts and opaque directories hide lower layers' entries;
// hard links, symlinks, modes, ownership, times and the extended attributes
// templates keep, file capabilities among them, are preserved), each
// checked against its diff ID in the image config, through the same checks
// and limits as any import. The image config's Env, WorkingDir, User,
// Entrypoint and Cmd become the template's Config.
//
// The same image gives the same template digest from every source.
func (s *Store) ImportImage(ctx context.Context, ref ImageRef, opts ImageOptions, progress func(Progress)) (Imported, error) {
	if ref.source == 0 {
		return Imported{}, rejectf("import image: empty image reference")
	}
	what := ref.String()
	img, err := ref.resolve(ctx, opts)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}
	plan, err := planImage(img, ref.source != ImageDockerArchive)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}
	s.logger.InfoContext(ctx, "template import: image resolved", "image", what, "digest", plan.digest,
		"layers", len(plan.layers))
	record := s.imageRecord(plan.digest)
	if record != "" {
		if imp, ok := s.remembered(record); ok {
			// The same image manifest made this template before: its layers
			// are not fetched again.
			s.logger.InfoContext(ctx, "template import: image imported before", "image", what,
				"digest", plan.digest, "template", imp.Digest)
			return imp, nil
		}
	}
	imp, err := s.importWith(ctx, progress, plan.config, what, func(ctx context.Context, stg *stager) error {
		a := newLayerApplier(stg)
		for i, l := range plan.layers {
			if err := a.applyLayer(ctx, l.layer, l.size, l.diffID); err != nil {
				return fmt.Errorf("layer %d of %d (%s): %w", i+1, len(plan.layers), l.diffID, err)
			}
		}
		return nil
	})
	if err == nil && record != "" {
		s.remember(record, imp.Digest)
	}
	return imp, err
}

// imageRecipe names how an image becomes a template: change it whenever
// ImportImage's output changes for the same image, so that a template
// remembered by an older conversion is not reused.
const imageRecipe = "image-v1"

// imageRecord is the file that remembers the template made from the image
// whose manifest has digest ("sha256:<hex>"), or "" when the manifest is
// not a registry's or a layout's own (a docker archive's is synthesized).
func (s *Store) imageRecord(digest string) string {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !sha256Hex.MatchString(hex) {
		return ""
	}
	return filepath.Join(s.dir, "sources", imageRecipe+"-"+hex)
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// resolve finds the image ref names, picking this host's platform from an
// image index.
func (r ImageRef) resolve(ctx context.Context, opts ImageOptions) (v1.Image, error) {
	switch r.source {
	case ImageRegistry:
		return resolveRemote(ctx, r.ref, opts)
	case ImageOCILayout:
		idx, err := layout.ImageIndexFromPath(r.path)
		if err != nil {
			return nil, fmt.Errorf("read OCI image layout: %w", err)
		}
		return pickPlatform(idx, "the OCI image layout", 0)
	case ImageDockerArchive:
		// nil tag: the archive must hold exactly one image.
		img, err := tarball.ImageFromPath(r.path, nil)
		if err != nil {
			return nil, fmt.Errorf("read docker archive: %w", err)
		}
		return img, nil
	}
	return nil, rejectf("unknown image source %v", r.source)
}

func resolveRemote(ctx context.Context, ref name.Reference, opts ImageOptions) (v1.Image, error) {
	if opts.Insecure {
		var err error
		if ref, err = name.ParseReference(ref.String(), name.Insecure); err != nil {
			return nil, rejectf("image reference: %v", err)
		}
	}
	next := opts.Transport
	if next == nil {
		next = remote.DefaultTransport
	}
	auth := remote.WithAuth(authn.Anonymous)
	if opts.Keychain != nil {
		auth = remote.WithAuthFromKeychain(opts.Keychain)
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(schemeGuard{next: next, insecure: opts.Insecure}),
		auth,
		remote.WithPlatform(hostPlatform()),
	}
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", ref, err)
	}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("read image index %s: %w", ref, err)
		}
		return pickPlatform(idx, "image index "+ref.String(), 0)
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, fmt.Errorf("read image %s: %w", ref, err)
		}
		return img, nil
	}
	return nil, rejectf("%s is a %s, not an image or image index", ref, desc.MediaType)
}

// schemeGuard refuses plain HTTP to hosts that are not loopback unless
// insecure is set.
type schemeGuard struct {
	next     http.RoundTripper
	insecure bool
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !g.insecure && !isLoopbackHost(req.URL.Hostname()) {
		// model.ErrInvalid: the reference, not the network, is at fault.
		return nil, rejectf("refusing plain HTTP to registry host %s: only loopback registries may be reached without TLS", req.URL.Host)
	}
	return g.next.RoundTrip(req)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pickPlatform returns the first image of idx (or of an index nested in it)
// for this host's platform. A descriptor without a platform (common in OCI
// layouts) is matched by its image config.
func pickPlatform(idx v1.ImageIndex, what string, depth int) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	var seen []string
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex() && depth < maxIndexDepth:
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("read image index %s in %s: %w", d.Digest, what, err)
			}
			img, err := pickPlatform(child, "image index "+d.Digest.String(), depth+1)
			if err == nil {
				return img, nil
			}
			seen = append(seen, "("+err.Error()+")")
		case d.MediaType.IsImage():
			if d.Platform != nil && !platformMatches(*d.Platform) {
				seen = append(seen, d.Platform.String())
				continue
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("read image %s in %s: %w", d.Digest, what, err)
			}
			if d.Platform == nil {
				cf, err := boundedConfig(img)
				if err != nil {
					return nil, fmt.Errorf("read config of image %s in %s: %w", d.Digest, what, err)
				}
				if p := configPlatform(cf); !platformMatches(p) {
					seen = append(seen, p.String())
					continue
				}
			}
			return img, nil
		}
	}
	want := hostPlatform()
	if len(seen) == 0 {
		return nil, rejectf("%s holds no image (this host needs %s)", what, want)
	}
	return nil, rejectf("%s has no image for this host's platform %s; it has: %s", what, want, strings.Join(seen, ", "))
}

// boundedConfig parses img's config after checking its size in the manifest.
func boundedConfig(img v1.Image) (*v1.ConfigFile, error) {
	mf, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if mf.Config.Size > maxImageConfig {
		return nil, tooLargef("the image config is %d bytes; at most %d are allowed", mf.Config.Size, maxImageConfig)
	}
	return img.ConfigFile()
}

func configPlatform(cf *v1.ConfigFile) v1.Platform {
	return v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
}

// platformMatches accepts p for this host: OS linux and the host's
// architecture; either left empty is taken as unspecified.
func platformMatches(p v1.Platform) bool {
	want := hostPlatform()
	return (p.OS == "" || p.OS == want.OS) && (p.Architecture == "" || p.Architecture == want.Architecture)
}

// imagePlan is a resolved image ready to apply.
type imagePlan struct {
	digest string // the image manifest's digest, for logs
	config Config
	layers []planLayer
}

type planLayer struct {
	layer  v1.Layer
	size   int64 // compressed size from the manifest; 0 if unknown
	diffID v1.Hash
}

// planImage checks img's config (against the manifest's config digest when
// the manifest is real, that is not synthesized by go-containerregistry for
// a docker archive, where computing it would compress every layer) and its
// platform, and pairs its layers with their diff IDs.
func planImage(img v1.Image, realManifest bool) (imagePlan, error) {
	var plan imagePlan
	var mf *v1.Manifest
	if realManifest {
		var err error
		if mf, err = img.Manifest(); err != nil {
			return plan, fmt.Errorf("read image manifest: %w", err)
		}
		if mf.Config.Size > maxImageConfig {
			return plan, tooLargef("the image config is %d bytes; at most %d are allowed", mf.Config.Size, maxImageConfig)
		}
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return plan, fmt.Errorf("read image config: %w", err)
	}
	if len(raw) > maxImageConfig {
		return plan, tooLargef("the image config is %d bytes; at most %d are allowed", len(raw), maxImageConfig)
	}
	if mf != nil {
		sum := sha256.Sum256(raw)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != mf.Config.Digest.String() {
			return plan, rejectf("the image config hashes to %s, the manifest says %s", got, mf.Config.Digest)
		}
		if d, err := img.Digest(); err == nil {
			plan.digest = d.String()
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return plan, rejectf("parse image config: %v", err)
	}
	if p := configPlatform(cf); !platformMatches(p) {
		return plan, rejectf("the image is for %s; this host needs %s", p, hostPlatform())
	}
	if plan.config, err = configFromImage(cf.Config); err != nil {
		return plan, err
	}
	layers, err := img.Layers()
	if err != nil {
		return plan, fmt.Errorf("read image layers: %w", err)
	}
	diffIDs := cf.RootFS.DiffIDs
	switch {
	case len(layers) > maxImageLayers:
		return plan, tooLargef("the image has %d layers; at most %d are allowed", len(layers), maxImageLayers)
	case len(layers) != len(diffIDs):
		return plan, rejectf("the image has %d layers but its config lists %d diff IDs", len(layers), len(diffIDs))
	case mf != nil && len(mf.Layers) != len(layers):
		return plan, rejectf("the image manifest lists %d layers, the image has %d", len(mf.Layers), len(layers))
	}
	for i, l := range layers {
		if mt, err := l.MediaType(); err == nil && !layerMediaTypeOK(mt) {
			return plan, rejectf("layer %d has media type %s, which is not a filesystem layer this store can apply", i+1, mt)
		}
		pl := planLayer{layer: l, diffID: diffIDs[i]}
		if mf != nil {
			pl.size = mf.Layers[i].Size
		}
		plan.layers = append(plan.layers, pl)
	}
	return plan, nil
}

// layerMediaTypeOK accepts tar layers, plain, gzip- or zstd-compressed, in
// their OCI and Docker spellings; foreign, non-distributable and encrypted
// layers are refused.
func layerMediaTypeOK(mt types.MediaType) bool {
	switch mt {
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerLayer, types.DockerUncompressedLayer:
		return true
	}
	return false
}
