package s3store_test

import (
	"testing"

	"github.com/airlockdev/airlock/internal/blobstore/s3store"
)

func TestParseURL(t *testing.T) {
	cfg, err := s3store.ParseURL("s3://airlock-blobs/node/a?endpoint=http://127.0.0.1:9000&region=eu-west-1&path_style=true")
	if err != nil {
		t.Fatal(err)
	}
	want := s3store.Config{Bucket: "airlock-blobs", Prefix: "node/a", Endpoint: "http://127.0.0.1:9000", Region: "eu-west-1", PathStyle: true}
	if cfg.Bucket != want.Bucket || cfg.Prefix != want.Prefix || cfg.Endpoint != want.Endpoint || cfg.Region != want.Region || !cfg.PathStyle {
		t.Errorf("ParseURL = %+v, want %+v", cfg, want)
	}
	for _, bad := range []string{
		"", "s3://", "file:///x", "s3://b", "s3://b?endpoint=x&endpoint=y", "s3://b?endpoint=http://h&bogus=1",
		"s3://user:pw@b?endpoint=http://h", "s3://b?endpoint=http://h&path_style=maybe",
	} {
		if _, err := s3store.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) succeeded", bad)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("s3://bucket/prefix?endpoint=http://127.0.0.1:1&region=us-east-1")
	f.Add("s3://b?endpoint=https://s3.amazonaws.com&path_style=false")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := s3store.ParseURL(s)
		if err != nil {
			return
		}
		if cfg.Bucket == "" || cfg.Endpoint == "" {
			t.Fatalf("ParseURL(%q) = %+v without bucket or endpoint", s, cfg)
		}
		// Whatever parses is still checked by New; it must not panic.
		cfg.AccessKey, cfg.SecretKey, cfg.TrustedBuckets = "k", "s", []string{cfg.Bucket}
		_, _ = s3store.New(cfg, nil)
	})
}
