package s3store

import (
	"errors"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestConfig(t *testing.T) {
	good := Config{
		Endpoint: "http://127.0.0.1:7070", Bucket: "templates", AccessKey: "k", SecretKey: "s",
		TrustedBuckets: []string{"templates"},
	}
	tests := []struct {
		name    string
		edit    func(c *Config)
		wantErr error // nil: valid
		check   func(t *testing.T, c Config)
	}{
		{"Good", func(c *Config) {}, nil, func(t *testing.T, c Config) {
			if c.Region != "us-east-1" || c.PartSize != DefaultPartSize || c.Prefix != "" {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"PrefixGetsSlash", func(c *Config) { c.Prefix = "airlock/prod" }, nil, func(t *testing.T, c Config) {
			if c.Prefix != "airlock/prod/" {
				t.Errorf("prefix %q", c.Prefix)
			}
		}},
		{"HTTPS", func(c *Config) { c.Endpoint = "https://s3.eu-west-1.amazonaws.com" }, nil, nil},
		{"UntrustedBucket", func(c *Config) { c.Bucket = "elsewhere" }, ErrUntrustedBucket, nil},
		{"NoTrustedBuckets", func(c *Config) { c.TrustedBuckets = nil }, ErrUntrustedBucket, nil},
		{"TrustIsExact", func(c *Config) { c.TrustedBuckets = []string{"Templates", "templates2"} }, ErrUntrustedBucket, nil},
		{"BadBucketName", func(c *Config) { c.Bucket = "No_Such"; c.TrustedBuckets = []string{"No_Such"} }, model.ErrInvalid, nil},
		{"NoScheme", func(c *Config) { c.Endpoint = "127.0.0.1:7070" }, model.ErrInvalid, nil},
		{"FTP", func(c *Config) { c.Endpoint = "ftp://host" }, model.ErrInvalid, nil},
		{"Path", func(c *Config) { c.Endpoint = "http://host/bucket" }, model.ErrInvalid, nil},
		{"UserInURL", func(c *Config) { c.Endpoint = "http://k:s@host" }, model.ErrInvalid, nil},
		{"NoSecret", func(c *Config) { c.SecretKey = "" }, model.ErrInvalid, nil},
		{"AbsolutePrefix", func(c *Config) { c.Prefix = "/x" }, model.ErrInvalid, nil},
		{"DoubleSlashPrefix", func(c *Config) { c.Prefix = "a//b" }, model.ErrInvalid, nil},
		{"TinyParts", func(c *Config) { c.PartSize = 1 << 20 }, model.ErrInvalid, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.TrustedBuckets = append([]string(nil), good.TrustedBuckets...)
			tc.edit(&c)
			got, _, err := c.normalized()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("normalized: %v", err)
				}
				if tc.check != nil {
					tc.check(t, got)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("normalized: %v, want %v", err, tc.wantErr)
			}
			if _, err := New(c, nil); !errors.Is(err, tc.wantErr) {
				t.Fatalf("New: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestPartSizeFor(t *testing.T) {
	tests := []struct{ configured, size, want int64 }{
		{DefaultPartSize, 0, DefaultPartSize},
		{DefaultPartSize, 64 << 20, DefaultPartSize},
		{DefaultPartSize, DefaultPartSize * maxParts, DefaultPartSize},
		{DefaultPartSize, DefaultPartSize*maxParts + 1, DefaultPartSize + 1<<20},
		{MinPartSize, 1 << 40, 105 << 20},
	}
	for _, tc := range tests {
		got := partSizeFor(tc.configured, tc.size)
		if got != tc.want {
			t.Errorf("partSizeFor(%d, %d) = %d, want %d", tc.configured, tc.size, got, tc.want)
		}
		if tc.size > 0 && (tc.size+got-1)/got > maxParts {
			t.Errorf("partSizeFor(%d, %d) = %d needs more than %d parts", tc.configured, tc.size, got, maxParts)
		}
	}
}
