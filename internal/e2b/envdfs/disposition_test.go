package envdfs

import (
	"errors"
	"mime"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseDisposition(t *testing.T) {
	tests := []struct {
		in      string
		want    disposition
		wantErr bool
	}{
		{in: `form-data; name="file"; filename="/home/user/a.txt"`, want: disposition{Type: "form-data", Name: "file", FileName: "/home/user/a.txt", HasFile: true}},
		{in: `form-data; name="file"; filename="dir/sub/b.bin"`, want: disposition{Type: "form-data", Name: "file", FileName: "dir/sub/b.bin", HasFile: true}},
		{in: `Form-Data ; NAME = "file" ; FileName = "x"`, want: disposition{Type: "form-data", Name: "file", FileName: "x", HasFile: true}},
		{in: `form-data; name=file; filename=plain.txt`, want: disposition{Type: "form-data", Name: "file", FileName: "plain.txt", HasFile: true}},
		{in: `form-data; name="file"`, want: disposition{Type: "form-data", Name: "file"}},
		{in: `form-data; name="file"; filename=""`, want: disposition{Type: "form-data", Name: "file", HasFile: true}},
		{in: `form-data; name="file"; filename="a \"q\" b"`, want: disposition{Type: "form-data", Name: "file", FileName: `a "q" b`, HasFile: true}},
		{in: `form-data; name="file"; filename="a%22q%22%0Ab"`, want: disposition{Type: "form-data", Name: "file", FileName: "a\"q\"\nb", HasFile: true}},
		{in: `form-data; name="file"; filename="C:\dir\x"`, want: disposition{Type: "form-data", Name: "file", FileName: `C:\dir\x`, HasFile: true}},
		{in: `form-data; name="file"; filename="a\\b"`, want: disposition{Type: "form-data", Name: "file", FileName: `a\b`, HasFile: true}},
		{in: `form-data; name="file"; filename="x;y=z"`, want: disposition{Type: "form-data", Name: "file", FileName: "x;y=z", HasFile: true}},
		{in: `form-data; name="file"; filename="ascii"; filename*=UTF-8''%2Fhome%2Fuser%2F%C3%A9.txt`, want: disposition{Type: "form-data", Name: "file", FileName: "/home/user/é.txt", HasFile: true}},
		{in: `form-data; name="file"; filename*=utf-8'en'a%20b`, want: disposition{Type: "form-data", Name: "file", FileName: "a b", HasFile: true}},
		{in: `form-data; name="file";`, want: disposition{Type: "form-data", Name: "file"}},
		{in: `form-data; name="file"; filename="../../etc/passwd"`, want: disposition{Type: "form-data", Name: "file", FileName: "../../etc/passwd", HasFile: true}},
		{in: ``, wantErr: true},
		{in: `; name="file"`, wantErr: true},
		{in: `form-data; name`, wantErr: true},
		{in: `form-data; ="x"`, wantErr: true},
		{in: `form-data; name="file`, wantErr: true},
		{in: `form-data; name="file" junk; filename="a"`, wantErr: true},
		// A filename* that does not decode is ignored (RFC 6266 §4.3:
		// filename is the fallback for it).
		{in: `form-data; filename*=latin1''a`, want: disposition{Type: "form-data"}},
		{in: `form-data; filename*=UTF-8''%ZZ`, want: disposition{Type: "form-data"}},
		{in: `form-data; filename*=noquotes`, want: disposition{Type: "form-data"}},
		{in: `form-data; name="file"; filename="fallback"; filename*=latin1''%E9`, want: disposition{Type: "form-data", Name: "file", FileName: "fallback", HasFile: true}},
		{in: `form-data; filename*=UTF-8''%FF`, wantErr: true},
		{in: "form-data; filename=\"\xff\"", wantErr: true},
		// RFC 2231 continuations.
		{in: `form-data; name="file"; filename*0="/home/"; filename*1="a.txt"`, want: disposition{Type: "form-data", Name: "file", FileName: "/home/a.txt", HasFile: true}},
		{in: `form-data; name="file"; filename*0*=UTF-8''%C3%A9; filename*1=".txt"`, want: disposition{Type: "form-data", Name: "file", FileName: "é.txt", HasFile: true}},
		// A parameter given twice must say the same.
		{in: `form-data; name="file"; name="other"`, wantErr: true},
		{in: `form-data; name="file"; name=file`, want: disposition{Type: "form-data", Name: "file"}},
		{in: `form-data; name="file"; filename=a b`, wantErr: true},
		{in: `form-data;;`, wantErr: true},
		{in: "form-data; name=\"file\"; filename=\"" + strings.Repeat("a", maxHeaderParam) + "\"", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseDisposition(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseDisposition(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, errBadDisposition) {
			t.Errorf("parseDisposition(%q) error %v does not wrap errBadDisposition", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("parseDisposition(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseDisposition(f *testing.F) {
	for _, s := range []string{
		`form-data; name="file"; filename="/home/user/a.txt"`,
		`form-data; name=file; filename=x`,
		`form-data; filename*=UTF-8''%2Fa`,
		`form-data; name="a\"b"`,
		`attachment`,
		`form-data; name="file"; filename="a%22b"`,
		`form-data; filename*0="a"; filename*1*=%20b`,
		`form-data; filename*=latin1''a; filename=b`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDisposition(s)
		if err != nil {
			if !errors.Is(err, errBadDisposition) {
				t.Fatalf("error %v does not wrap errBadDisposition", err)
			}
			if d != (disposition{}) {
				t.Fatalf("error with a non-zero result %+v", d)
			}
			return
		}
		if d.Type == "" || d.Type != strings.ToLower(d.Type) {
			t.Fatalf("type %q", d.Type)
		}
		if !d.HasFile && d.FileName != "" {
			t.Fatalf("filename %q without HasFile", d.FileName)
		}
		if len(d.FileName) > len(s) || len(d.Name) > len(s) {
			t.Fatalf("values longer than the header: %+v", d)
		}
		if !utf8.ValidString(d.FileName) {
			t.Fatalf("filename %q is not UTF-8", d.FileName)
		}
		// A filename round-trips through mime.FormatMediaType (quoted, or
		// filename* for one that needs it); '%' is left out, the plain
		// filename's form-data escapes would undo it.
		if d.HasFile && !strings.Contains(d.FileName, "%") {
			h := mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": d.FileName})
			d2, err := parseDisposition(h)
			if err != nil || d2.FileName != d.FileName || !d2.HasFile || d2.Name != "file" {
				t.Fatalf("round trip of %q through %q: %+v, %v", d.FileName, h, d2, err)
			}
		}
	})
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		in             string
		gzip, identity bool
	}{
		{"", false, true},
		{"gzip", true, true},
		{"gzip, deflate, br", true, true},
		{"GZIP;q=0.5", true, true},
		{"gzip;q=0", false, true},
		{"br", false, true},
		{"identity", false, true},
		{"identity;q=0", false, false},
		{"br, identity;q=0", false, false},
		{"*", true, true},
		{"*;q=0", false, false},
		{"*;q=0, identity", false, true},
		{"gzip;q=0, *", false, true},
		{"gzip;q=abc", false, true},
		{"x-gzip", true, true},
		{"gzip;q=2", false, true},
		{"*;q=2", false, true},
		{"gzip;q=abc, *", true, true},
	}
	for _, tt := range tests {
		g, i := acceptsGzip(tt.in)
		if g != tt.gzip || i != tt.identity {
			t.Errorf("acceptsGzip(%q) = %v, %v; want %v, %v", tt.in, g, i, tt.gzip, tt.identity)
		}
	}
}

func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0, *", "identity;q=0", "*;q=0.1", ",;=,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, i := acceptsGzip(s)
		if !strings.Contains(strings.ToLower(s), "gzip") && !strings.Contains(s, "*") && g {
			t.Fatalf("%q: gzip without gzip or *", s)
		}
		if !i && !strings.Contains(s, "0") {
			t.Fatalf("%q: identity refused without q=0", s)
		}
	})
}
