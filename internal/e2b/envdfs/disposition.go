package envdfs

import (
	"errors"
	"fmt"
	"mime"
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
	HasFile  bool   // a filename was given (filename, or a filename* that decodes)
}

var errBadDisposition = errors.New("bad Content-Disposition")

// parseDisposition parses a part's Content-Disposition with
// mime.ParseMediaType. Unlike multipart.Part.FileName it keeps the
// filename's directories: E2B puts the target path there. Quoted values
// take backslash escapes (a backslash before anything but a tspecial is
// literal, as browsers send Windows paths) and the plain filename the HTML
// form-data escapes %22, %0A and %0D. filename* (RFC 5987: charset,
// language and the percent-encoded name, separated by apostrophes; UTF-8
// or US-ASCII) and RFC 2231 continuations win over filename; a filename*
// the standard library cannot decode is ignored, as RFC 6266 has it, so
// filename is the fallback. A filename must be valid UTF-8.
func parseDisposition(h string) (disposition, error) {
	if len(h) > maxHeaderParam {
		return disposition{}, fmt.Errorf("%w: longer than %d bytes", errBadDisposition, maxHeaderParam)
	}
	typ, params, err := mime.ParseMediaType(h)
	if err != nil {
		return disposition{}, fmt.Errorf("%w: %w", errBadDisposition, err)
	}
	d := disposition{Type: typ, Name: params["name"]}
	d.FileName, d.HasFile = params["filename"]
	if !utf8.ValidString(d.FileName) {
		return disposition{}, fmt.Errorf("%w: filename is not UTF-8", errBadDisposition)
	}
	d.FileName = formUnescape(d.FileName)
	return d, nil
}

// formUnescape undoes the HTML form-data filename escapes.
func formUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	r := strings.NewReplacer("%22", `"`, "%0A", "\n", "%0a", "\n", "%0D", "\r", "%0d", "\r")
	return r.Replace(s)
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
