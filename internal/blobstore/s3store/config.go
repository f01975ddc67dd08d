package s3store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/airlockdev/airlock/internal/model"
)

// ErrUntrustedBucket is wrapped when the configured bucket is not on the
// configured list of trusted buckets.
var ErrUntrustedBucket = errors.New("bucket is not on the list of trusted buckets")

// Defaults.
const (
	DefaultPartSize = 16 << 20 // bytes per multipart part; also the largest single PUT
	MinPartSize     = 5 << 20  // S3's minimum for every part but the last
	maxParts        = 10_000   // S3's maximum number of parts
)

// Config says where the blobs live and how to reach them.
type Config struct {
	// Endpoint is the server's URL: "https://s3.eu-west-1.amazonaws.com",
	// "http://127.0.0.1:7070". No path.
	Endpoint string
	// Region is the bucket's region ("us-east-1" if empty).
	Region string
	// Bucket holds the blobs. It must be on TrustedBuckets.
	Bucket string
	// Prefix is prepended to every key ("" or ending in "/", e.g.
	// "airlock/"); blob d is the object <Prefix>blobs/sha256/<hex>.
	Prefix string
	// AccessKey and SecretKey (and SessionToken for temporary credentials)
	// sign the requests.
	AccessKey, SecretKey, SessionToken string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// instead of the host name. Without it the client picks: path style
	// for IP addresses and hosts other than AWS's.
	PathStyle bool
	// TrustedBuckets is the operator's allowlist: a Store refuses to use a
	// bucket that is not on it. Empty trusts none.
	TrustedBuckets []string
	// PartSize is the size of multipart parts and the largest blob sent in
	// one PUT (default DefaultPartSize, at least MinPartSize). One Put
	// holds one part in memory.
	PartSize int64
}

// normalized returns c with defaults filled in, or an error saying what is
// wrong with it. Errors wrap model.ErrInvalid, and ErrUntrustedBucket for a
// bucket off the allowlist.
func (c Config) normalized() (Config, *url.URL, error) {
	invalid := func(format string, args ...any) (Config, *url.URL, error) {
		return Config{}, nil, fmt.Errorf("%w: s3 blob store: "+format, append([]any{model.ErrInvalid}, args...)...)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("endpoint %q must be an http:// or https:// URL", c.Endpoint)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return invalid("endpoint %q must be a bare scheme://host[:port], without path, query or user", c.Endpoint)
	}
	if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		return invalid("bucket %q: %v", c.Bucket, err)
	}
	if !slices.Contains(c.TrustedBuckets, c.Bucket) {
		return Config{}, nil, fmt.Errorf("%w: s3 blob store: bucket %q (trusted: %q)", ErrUntrustedBucket, c.Bucket, c.TrustedBuckets)
	}
	if c.Prefix != "" {
		if strings.HasPrefix(c.Prefix, "/") || strings.Contains(c.Prefix, "//") {
			return invalid("prefix %q must not start with / or contain //", c.Prefix)
		}
		if !strings.HasSuffix(c.Prefix, "/") {
			c.Prefix += "/"
		}
		if err := s3utils.CheckValidObjectNamePrefix(c.Prefix); err != nil {
			return invalid("prefix %q: %v", c.Prefix, err)
		}
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return invalid("access key and secret key are required")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	switch {
	case c.PartSize == 0:
		c.PartSize = DefaultPartSize
	case c.PartSize < MinPartSize:
		return invalid("part size %d is below S3's minimum of %d", c.PartSize, MinPartSize)
	}
	return c, u, nil
}

// isLoopback reports whether host (of a URL) names this machine.
func isLoopback(host string) bool {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// partSizeFor returns the part size for a blob of size bytes: the
// configured one, grown if the blob would otherwise need more than S3's
// 10,000 parts (rounded up to a MiB).
func partSizeFor(configured, size int64) int64 {
	need := (size + maxParts - 1) / maxParts
	if need <= configured {
		return configured
	}
	const mib = 1 << 20
	return (need + mib - 1) / mib * mib
}
