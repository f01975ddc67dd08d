package envdfs

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxHeaderParam bounds a Content-Disposition header we parse.
const maxHeaderParam = 16 << 10

// disposition is a parsed Content-Disposition header of a form-data part.
type disposition struct {
	Type     string // "form-data"
	Name     string // the form field
	FileName string // the part's filename, directories and all
	HasFile  bool   // a filename (or filename*) parameter was present
}

var errBadDisposition = errors.New("bad Content-Disposition")

// parseDisposition parses a part's Content-Disposition. Unlike
// multipart.Part.FileName it keeps the filename's directories: E2B puts the
// target path there. Quoted values take backslash escapes of '"' and '\'
// only (any other backslash is literal, as browsers send it) and the
// HTML form-data escapes %22, %0A and %0D; filename* (RFC 5987:
// charset, language and the percent-encoded name, separated by
// apostrophes) wins over filename.
func parseDisposition(h string) (disposition, error) {
	var d disposition
	if len(h) > maxHeaderParam {
		return d, fmt.Errorf("%w: longer than %d bytes", errBadDisposition, maxHeaderParam)
	}
	typ, rest, _ := strings.Cut(h, ";")
	d.Type = strings.ToLower(strings.TrimSpace(typ))
	if d.Type == "" || !isToken(d.Type) {
		return disposition{}, fmt.Errorf("%w: no disposition type", errBadDisposition)
	}
	var plain, ext string
	var hasPlain, hasExt bool
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			break
		}
		var key, val string
		var err error
		key, val, rest, err = nextParam(rest)
		if err != nil {
			return disposition{}, err
		}
		switch key {
		case "name":
			d.Name = val
		case "filename":
			plain, hasPlain = formUnescape(val), true
		case "filename*":
			ext, err = decodeExtValue(val)
			if err != nil {
				return disposition{}, err
			}
			hasExt = true
		}
	}
	switch {
	case hasExt:
		d.FileName, d.HasFile = ext, true
	case hasPlain:
		d.FileName, d.HasFile = plain, true
	}
	return d, nil
}

// nextParam reads `key=value` (value a token or a quoted string) and the
// separator after it.
func nextParam(s string) (key, val, rest string, err error) {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return "", "", "", fmt.Errorf("%w: parameter without '='", errBadDisposition)
	}
	key = strings.ToLower(strings.TrimSpace(s[:eq]))
	if !isToken(key) {
		return "", "", "", fmt.Errorf("%w: bad parameter name %q", errBadDisposition, truncate(key))
	}
	s = strings.TrimLeft(s[eq+1:], " \t")
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		i := 1
		for ; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				break
			}
			if c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
				i++
				c = s[i]
			}
			b.WriteByte(c)
		}
		if i >= len(s) {
			return "", "", "", fmt.Errorf("%w: unterminated quoted value of %s", errBadDisposition, key)
		}
		val, s = b.String(), strings.TrimLeft(s[i+1:], " \t")
	} else {
		end := strings.IndexByte(s, ';')
		if end < 0 {
			end = len(s)
		}
		val, s = strings.TrimRight(s[:end], " \t"), s[end:]
	}
	switch {
	case s == "":
	case s[0] == ';':
		s = s[1:]
	default:
		return "", "", "", fmt.Errorf("%w: junk after the value of %s", errBadDisposition, key)
	}
	return key, val, s, nil
}

// formUnescape undoes the HTML form-data filename escapes.
func formUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	r := strings.NewReplacer("%22", `"`, "%0A", "\n", "%0a", "\n", "%0D", "\r", "%0d", "\r")
	return r.Replace(s)
}

// decodeExtValue decodes an RFC 5987 ext-value: charset'lang'pct-encoded.
// Only UTF-8 (and its subset US-ASCII) is accepted.
func decodeExtValue(v string) (string, error) {
	charset, rest, ok := strings.Cut(v, "'")
	if !ok {
		return "", fmt.Errorf("%w: filename* without charset", errBadDisposition)
	}
	_, enc, ok := strings.Cut(rest, "'")
	if !ok {
		return "", fmt.Errorf("%w: filename* without language", errBadDisposition)
	}
	switch strings.ToLower(charset) {
	case "utf-8", "us-ascii":
	default:
		return "", fmt.Errorf("%w: filename* charset %q is not UTF-8", errBadDisposition, truncate(charset))
	}
	s, err := url.PathUnescape(enc)
	if err != nil || !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: filename* is not percent-encoded UTF-8", errBadDisposition)
	}
	return s, nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// acceptsGzip parses Accept-Encoding: gzip reports that gzip is acceptable
// (q > 0, named or through "*"); identity that an uncompressed answer is
// (it is unless refused by "identity;q=0", or by "*;q=0" without an
// identity entry).
func acceptsGzip(h string) (gzip, identity bool) {
	gzipQ, identityQ, starQ := -1.0, -1.0, -1.0
	for item := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(item, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		q, ok := qValue(params)
		if !ok {
			continue // a malformed weight: the entry is ignored
		}
		switch name {
		case "gzip", "x-gzip":
			gzipQ = max(gzipQ, q)
		case "identity":
			identityQ = max(identityQ, q)
		case "*":
			starQ = max(starQ, q)
		}
	}
	gzip = gzipQ > 0 || (gzipQ < 0 && starQ > 0)
	identity = identityQ > 0 || (identityQ < 0 && starQ != 0)
	return gzip, identity
}

// qValue reads the q parameter of an Accept-Encoding entry (1 when
// absent); ok is false when it is not a number in [0, 1].
func qValue(params string) (q float64, ok bool) {
	q = 1
	for p := range strings.SplitSeq(params, ";") {
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		if !found || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return 0, false
		}
		q = f
	}
	return q, true
}
