package s3store

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// ParseURL parses a blob store URL of the form
//
//	s3://BUCKET[/PREFIX]?endpoint=http://127.0.0.1:7070[&region=R][&path_style=true]
//
// into the Config fields it names (Bucket, Prefix, Endpoint, Region,
// PathStyle). Credentials and the trusted buckets are not part of a URL;
// the caller fills them in, and New checks the whole Config. Errors wrap
// model.ErrInvalid.
func ParseURL(s string) (Config, error) {
	invalid := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: s3 blob store URL: "+format, append([]any{model.ErrInvalid}, args...)...)
	}
	u, err := url.Parse(s)
	if err != nil {
		return invalid("%v", err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return invalid("%q must be s3://BUCKET[/PREFIX]?endpoint=URL", s)
	}
	cfg := Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return invalid("query: %v", err)
	}
	for k, v := range q {
		if len(v) != 1 {
			return invalid("parameter %q is given %d times", k, len(v))
		}
		switch k {
		case "endpoint":
			cfg.Endpoint = v[0]
		case "region":
			cfg.Region = v[0]
		case "path_style":
			b, err := strconv.ParseBool(v[0])
			if err != nil {
				return invalid("path_style %q is not true or false", v[0])
			}
			cfg.PathStyle = b
		default:
			return invalid("unknown parameter %q (want endpoint, region, path_style)", k)
		}
	}
	if cfg.Endpoint == "" {
		return invalid("%q names no endpoint (?endpoint=https://…)", s)
	}
	return cfg, nil
}
