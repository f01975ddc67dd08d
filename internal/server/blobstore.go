package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/blobstore/s3store"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/template/distribute"
)

// blobTmpDir (under the data dir) holds template archives while they are
// written and pushed.
const blobTmpDir = "tmp/blobstore"

// openBlobStore opens the shared blob store that opts.BlobStore names:
// file:///DIR (a directory, possibly on a shared filesystem) or
// s3://BUCKET[/PREFIX]?endpoint=…&region=…&path_style=… (see
// s3store.ParseURL), with credentials from opts.BlobStoreCredentials or
// else $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN,
// and the bucket on opts.TrustedBuckets. "" means no blob store (nil).
func openBlobStore(ctx context.Context, opts Options, log *slog.Logger) (blobstore.Store, error) {
	raw := opts.BlobStore
	switch {
	case raw == "":
		return nil, nil
	case strings.HasPrefix(raw, "file:"):
		u, err := url.Parse(raw)
		if err != nil || u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
			return nil, fmt.Errorf("%w: --blob-store %q: want file:///ABSOLUTE/DIR", model.ErrInvalid, raw)
		}
		return diskstore.Open(u.Path, log)
	case strings.HasPrefix(raw, "s3:"):
		cfg, err := s3store.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("--blob-store: %w", err)
		}
		cfg.TrustedBuckets = opts.TrustedBuckets
		if opts.BlobStoreCredentials != "" {
			if cfg.AccessKey, cfg.SecretKey, cfg.SessionToken, err = readS3Credentials(opts.BlobStoreCredentials); err != nil {
				return nil, err
			}
		} else {
			cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
			cfg.SessionToken = os.Getenv("AWS_SESSION_TOKEN")
		}
		s, err := s3store.New(cfg, log)
		if err != nil {
			return nil, fmt.Errorf("--blob-store: %w", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.Check(cctx); err != nil {
			return nil, fmt.Errorf("--blob-store: %w", err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: --blob-store %q: want file:///DIR or s3://BUCKET?endpoint=URL", model.ErrInvalid, raw)
}

// readS3Credentials reads a file of KEY=VALUE lines with
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
// AWS_SESSION_TOKEN (blank lines and # comments ignored). It must not be
// readable by group or others.
func readS3Credentials(path string) (access, secret, token string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", "", fmt.Errorf("--blob-store-credentials: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", "", fmt.Errorf("--blob-store-credentials: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", "", "", fmt.Errorf("--blob-store-credentials %s: mode %o lets others read the secret; chmod 600 it", path, fi.Mode().Perm())
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return "", "", "", fmt.Errorf("--blob-store-credentials %s: a line is not KEY=VALUE", path)
		case k == "AWS_ACCESS_KEY_ID":
			access = v
		case k == "AWS_SECRET_ACCESS_KEY":
			secret = v
		case k == "AWS_SESSION_TOKEN":
			token = v
		default:
			return "", "", "", fmt.Errorf("--blob-store-credentials %s: unknown key %q", path, k)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", "", fmt.Errorf("--blob-store-credentials: %w", err)
	}
	return access, secret, token, nil
}

// newDistributor opens the blob store and returns the template
// distributor on it, or nil without a blob store. Archives left in the
// temporary directory by a crash are removed.
func newDistributor(ctx context.Context, opts Options, dd *dataDir, templates *template.Store, log *slog.Logger) (*distribute.Distributor, error) {
	bs, err := openBlobStore(ctx, opts, log.With("component", "blobstore"))
	if err != nil || bs == nil {
		return nil, err
	}
	tmp := dd.join(blobTmpDir)
	if err := os.RemoveAll(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("blob store temporary directory: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("blob store temporary directory: %w", err)
	}
	log.Info("blob store", "url", opts.BlobStore)
	return distribute.New(distribute.Config{Templates: templates, Blobs: bs, TempDir: tmp, Logger: log.With("component", "distribute")})
}

// publishDefault pushes the templates named default and minimal, where
// they exist, to the blob store. A failure is logged, not fatal: the server
// runs on, and the next start (or build) pushes again.
func publishDefault(ctx context.Context, st interface {
	ResolveTemplate(context.Context, model.TemplateRef) (model.Template, error)
}, dist *distribute.Distributor, log *slog.Logger) {
	if dist == nil {
		return
	}
	for _, name := range []model.TaggedName{model.DefaultTemplate, minimalTemplate} {
		t, err := st.ResolveTemplate(ctx, model.RefByName(name))
		if err != nil {
			continue // not (yet) there: its build pushes it
		}
		if _, err := dist.Publish(ctx, t.Digest); err != nil {
			log.Warn("cannot push a template to the blob store", "name", name, "digest", t.Digest, "err", err)
		}
	}
}

// fetchTemplate is the worker's FetchTemplate: nil without a blob store.
// A template already here costs one lstat.
func fetchTemplate(templates *template.Store, dist *distribute.Distributor) func(context.Context, model.TemplateDigest) error {
	if dist == nil {
		return nil
	}
	return func(ctx context.Context, d model.TemplateDigest) error {
		if templates.Has(d) {
			return nil
		}
		_, err := dist.Fetch(ctx, d)
		return err
	}
}

// distribution is the Distribution of the API and the build runner: nil
// (an interface holding no pointer) without a blob store.
func distribution(dist *distribute.Distributor) build.Distributor {
	if dist == nil {
		return nil
	}
	return dist
}

// snapshotBlobs is the blob store saved snapshots are pushed to: the
// templates' (nil without one).
func snapshotBlobs(dist *distribute.Distributor) blobstore.Store {
	if dist == nil {
		return nil
	}
	return dist.Blobs()
}
