package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlockdev/airlock/internal/model"
)

type badImage struct {
	name     string
	layers   [][]byte
	limits   *Limits
	tooLarge bool
}

// badImages builds images that must be refused. outside is an absolute
// directory holding "victim" that an escape would reach.
func badImages(t testing.TB, outside string) []badImage {
	small := &Limits{MaxBytes: 1 << 20, MaxEntries: 100, MaxPathLen: 1024}
	random := make([]byte, 3<<20)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	// A tiny file followed by 64 MiB of zeros after the end of the archive:
	// a few hundred KiB compressed, far over the budget uncompressed.
	bomb := append(makeTar(t, reg("a", "x")), make([]byte, 64<<20)...)
	return []badImage{
		{name: "whiteout of ..", layers: [][]byte{
			makeTar(t, dirEntry("d/"), reg("d/f", "x")),
			makeTar(t, whiteoutEntry("d/.wh.."))}},
		{name: "whiteout of .", layers: [][]byte{makeTar(t, dirEntry("d/")), makeTar(t, whiteoutEntry("d/.wh."))}},
		{name: "whiteout path traversal", layers: [][]byte{makeTar(t, reg("a", "x")), makeTar(t, whiteoutEntry(up+"outside/.wh.victim"))}},
		{name: "whiteout absolute", layers: [][]byte{makeTar(t, reg("a", "x")), makeTar(t, whiteoutEntry(outside+"/.wh.victim"))}},
		{name: "layer path traversal", layers: [][]byte{makeTar(t, reg(up+"outside/pwned", "x"))}},
		{name: "layer absolute path", layers: [][]byte{makeTar(t, reg(outside+"/pwned", "x"))}},
		{name: "hardlink to outside", layers: [][]byte{makeTar(t, hardlinkEntry("h", outside+"/victim"))}},
		{name: "hardlink dotdot", layers: [][]byte{makeTar(t, reg("a", "x")), makeTar(t, hardlinkEntry("h", up+"outside/victim"))}},
		{name: "symlink then write through", layers: [][]byte{
			makeTar(t, symlinkEntry("s", outside)),
			makeTar(t, reg("s/victim", "pwned"))}},
		{name: "relative symlink then write through", layers: [][]byte{
			makeTar(t, symlinkEntry("s", up+"outside")),
			makeTar(t, reg("s/pwned", "x"))}},
		{name: "symlink to / then write /etc", layers: [][]byte{
			makeTar(t, symlinkEntry("etc", "/etc")),
			makeTar(t, reg("etc/airlock-test-pwned", "x"))}},
		{name: "symlink then mkdir through", layers: [][]byte{
			makeTar(t, symlinkEntry("s", outside)),
			makeTar(t, dirEntry("s/newdir/"))}},
		{name: "symlink then whiteout through", layers: [][]byte{
			makeTar(t, symlinkEntry("s", outside)),
			makeTar(t, whiteoutEntry("s/.wh.victim"))}},
		{name: "symlink then hardlink through", layers: [][]byte{
			makeTar(t, symlinkEntry("s", outside)),
			makeTar(t, hardlinkEntry("h", "s/victim"))}},
		{name: "directory replaced by symlink then written through", layers: [][]byte{
			makeTar(t, dirEntry("d/")),
			makeTar(t, symlinkEntry("d", outside)),
			makeTar(t, reg("d/pwned", "x"))}},
		{name: "hardlink to a whited-out file", layers: [][]byte{
			makeTar(t, reg("f", "x")),
			makeTar(t, whiteoutEntry(".wh.f"), hardlinkEntry("h", "f"))}},
		{name: "device node", layers: [][]byte{makeTar(t, tarEntry{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}})}},
		{name: "overlay whiteout device", layers: [][]byte{makeTar(t, tarEntry{hdr: tar.Header{Name: "gone", Typeflag: tar.TypeChar}})}},
		{name: "invalid capability", layers: [][]byte{makeTar(t, withXattrs(reg("f", "x"), "security.capability", "garbage"))}},
		{name: "truncated layer", layers: [][]byte{makeTar(t, reg("a", strings.Repeat("x", 4000)))[:1024]}},
		{name: "file over the limits", layers: [][]byte{makeTar(t, reg("big", strings.Repeat("x", 2<<20)))}, limits: small, tooLarge: true},
		{name: "incompressible layer over the limits", layers: [][]byte{makeTar(t, reg("big", string(random)))}, limits: small, tooLarge: true},
		{name: "layer bomb", layers: [][]byte{bomb}, limits: small, tooLarge: true},
		{name: "too many entries over layers", layers: [][]byte{
			makeTar(t, manyFiles(60)...), makeTar(t, manyFiles(60)...)}, limits: small, tooLarge: true},
		{name: "whiteouts count", layers: [][]byte{makeTar(t, manyWhiteouts(200)...)}, limits: small, tooLarge: true},
	}
}

func manyFiles(n int) []tarEntry {
	out := make([]tarEntry, n)
	for i := range out {
		out[i] = reg("f"+strings.Repeat("x", i), "")
	}
	return out
}

func manyWhiteouts(n int) []tarEntry {
	out := make([]tarEntry, n)
	for i := range out {
		out[i] = whiteoutEntry(".wh.f" + strings.Repeat("x", i))
	}
	return out
}

func TestMaliciousImageIsRefused(t *testing.T) {
	for _, c := range badImages(t, "/nonexistent") {
		t.Run(c.name, func(t *testing.T) {
			s, tmp := newStore(t)
			outside := filepath.Join(tmp, "outside")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			var layers [][]byte
			for _, b := range badImages(t, outside) {
				if b.name == c.name {
					layers = b.layers
				}
			}
			img := imageOf(t, "", v1.Config{}, layers...)
			dir := writeLayout(t, filepath.Join(tmp, "layout"), img)
			if c.limits != nil {
				if err := s.SetLimits(*c.limits); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, tmp, s.Dir())
			imp, err := s.ImportImage(context.Background(), mustRef(t, "oci-layout:"+dir), ImageOptions{}, nil)
			if err == nil {
				t.Fatalf("accepted: %s", imp.Digest)
			}
			if !errors.Is(err, model.ErrInvalid) {
				t.Errorf("err = %v, want one wrapping model.ErrInvalid", err)
			}
			if c.tooLarge != errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v; wraps ErrTooLarge: %v, want %v", err, errors.Is(err, ErrTooLarge), c.tooLarge)
			}
			t.Logf("refused: %v", err)
			after := snapshot(t, tmp, s.Dir())
			for p, d := range after {
				if before[p] != d {
					t.Errorf("written outside the store: %s = %q", p, d)
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("removed outside the store: %s", p)
				}
			}
			if _, err := os.Lstat("/etc/airlock-test-pwned"); err == nil {
				t.Error("/etc/airlock-test-pwned was written")
			}
			requireEmptyStore(t, s)
		})
	}
}

// An opaque marker inside a symlinked directory reaches nothing: the
// symlink is an entry of the tree, not a way out of it.
func TestImageOpaqueThroughSymlinkIsInert(t *testing.T) {
	s, tmp := newStore(t)
	outside := filepath.Join(tmp, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := imageOf(t, "", v1.Config{},
		makeTar(t, symlinkEntry("s", outside)),
		makeTar(t, whiteoutEntry("s/.wh..wh..opq")))
	if _, err := importLayout(t, s, tmp, img); err != nil && !errors.Is(err, model.ErrInvalid) {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(victim); err != nil || string(got) != "original" {
		t.Fatalf("victim = %q, %v", got, err)
	}
}

// corruptBlob flips the byte at offset off of blob digest d served by the
// registry (off < 0: counted from the end).
func corruptBlob(d v1.Hash, off int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+d.String()) {
				next.ServeHTTP(w, r)
				return
			}
			rec := &captureWriter{header: http.Header{}}
			next.ServeHTTP(rec, r)
			body := rec.body.Bytes()
			flipByte(body, off)
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			w.Write(body)
		})
	}
}

type captureWriter struct {
	header http.Header
	body   bytes.Buffer
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}
func (c *captureWriter) WriteHeader(status int) { c.status = status }

func flipByte(b []byte, off int) {
	if off < 0 {
		off += len(b)
	}
	if off >= 0 && off < len(b) {
		b[off] ^= 0x01
	}
}

func TestImageLayerDigestMismatchIsRefused(t *testing.T) {
	ctx := context.Background()
	content := makeTar(t, reg("a", strings.Repeat("content ", 1000)))
	gzipped := imageOf(t, "", v1.Config{}, content, makeTar(t, reg("b", "b")))
	// An uncompressed layer: a flipped content byte still reads as a valid
	// tar, so only the digest checks can catch it.
	plain := imageWithLayers(t, "", v1.Config{}, static.NewLayer(content, types.OCIUncompressedLayer))
	for _, c := range []struct {
		name string
		img  v1.Image
		off  int
		want string
	}{
		{name: "gzip layer, flipped payload byte", img: gzipped, off: -30},
		{name: "gzip layer, flipped trailer byte", img: gzipped, off: -3},
		{name: "uncompressed layer, flipped content byte", img: plain, off: 600, want: "digest"},
	} {
		layers, err := c.img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		first, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		t.Run("registry, "+c.name, func(t *testing.T) {
			s, _ := newStore(t)
			ref := pushImage(t, serveRegistry(t, corruptBlob(first, c.off)), "corrupt/img:v1", c.img)
			_, err := s.ImportImage(ctx, mustRef(t, ref), ImageOptions{}, nil)
			if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, c.want)
			}
			t.Logf("refused: %v", err)
			requireEmptyStore(t, s)
		})
		t.Run("oci layout, "+c.name, func(t *testing.T) {
			s, tmp := newStore(t)
			dir := writeLayout(t, filepath.Join(tmp, "layout"), c.img)
			blob := filepath.Join(dir, "blobs", first.Algorithm, first.Hex)
			data, err := os.ReadFile(blob)
			if err != nil {
				t.Fatal(err)
			}
			flipByte(data, c.off)
			if err := os.WriteFile(blob, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = s.ImportImage(ctx, mustRef(t, "oci-layout:"+dir), ImageOptions{}, nil)
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			t.Logf("refused: %v", err)
			requireEmptyStore(t, s)
		})
	}
	img := gzipped

	t.Run("diff id in config", func(t *testing.T) {
		s, tmp := newStore(t)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.RootFS.DiffIDs[1] = cf.RootFS.DiffIDs[0] // a valid digest, of another layer
		bad, err := mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{
			"oci-layout:" + writeLayout(t, filepath.Join(tmp, "layout"), bad),
			"docker-archive:" + writeDockerArchive(t, filepath.Join(tmp, "image.tar"), bad),
		} {
			_, err = s.ImportImage(ctx, mustRef(t, ref), ImageOptions{}, nil)
			if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "image config says") {
				t.Errorf("%s: err = %v, want ErrInvalid about the diff ID", ref, err)
			}
		}
		requireEmptyStore(t, s)
	})
}

// Plain HTTP goes only to loopback registries unless Insecure is set.
func TestImageRegistrySchemeGuard(t *testing.T) {
	var seen []string
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = append(seen, r.URL.Scheme+"://"+r.URL.Host)
		return nil, errors.New("no network in this test")
	})
	s, _ := newStore(t)
	for _, ref := range []string{"10.1.2.3:5000/img:v1", "registry.local/img:v1", "192.168.1.1/img:v1"} {
		seen = nil
		_, err := s.ImportImage(context.Background(), mustRef(t, ref), ImageOptions{Transport: rt}, nil)
		if err == nil {
			t.Fatalf("%s: imported without a registry", ref)
		}
		for _, u := range seen {
			if strings.HasPrefix(u, "http://") {
				t.Errorf("%s: plain HTTP request to %s", ref, u)
			}
		}
	}
	g := schemeGuard{next: rt}
	for url, ok := range map[string]bool{
		"http://127.0.0.1:5000/v2/": true, "http://localhost:5000/v2/": true, "http://[::1]:5000/v2/": true,
		"http://10.0.0.1/v2/": false, "http://example.com/v2/": false, "https://example.com/v2/": true,
	} {
		seen = nil
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.RoundTrip(req)
		if got := len(seen) == 1; got != ok {
			t.Errorf("%s: passed %v, want %v", url, got, ok)
		}
	}
	seen = nil
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.1/v2/", nil)
	schemeGuard{next: rt, insecure: true}.RoundTrip(req)
	if len(seen) != 1 {
		t.Error("Insecure did not allow plain HTTP")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// gzipLen is how large data is gzip-compressed, to keep the bomb honest.
func gzipLen(t testing.TB, data []byte) int {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	io.Copy(gz, bytes.NewReader(data))
	gz.Close()
	return buf.Len()
}

func TestImageBombIsSmallCompressed(t *testing.T) {
	for _, c := range badImages(t, "/nonexistent") {
		if c.name == "layer bomb" {
			if n := gzipLen(t, c.layers[0]); n > 1<<20 {
				t.Fatalf("the bomb is %d bytes compressed; it must pass the compressed-size check to test the stream budget", n)
			}
		}
	}
}

// FuzzImageLayers applies two fuzzed tar layers, lower then upper, the way
// ImportImage does (without the image around them): nothing may escape the
// store, and what is accepted must verify.
func FuzzImageLayers(f *testing.F) {
	for _, c := range badImages(f, "/tmp") {
		if len(c.layers) == 2 && c.limits == nil {
			f.Add(c.layers[0], c.layers[1])
		}
	}
	f.Add(makeTar(f, dirEntry("d/"), reg("d/a", "a"), reg("f", "x")),
		makeTar(f, dirEntry("d/"), whiteoutEntry("d/.wh..wh..opq"), reg("d/b", "b"), whiteoutEntry(".wh.f")))
	s, tmp := newStore(f)
	if err := s.SetLimits(Limits{MaxBytes: 1 << 20, MaxEntries: 1000, MaxPathLen: 1024}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, lower, upper []byte) {
		ctx := context.Background()
		blobsBefore := listDir(t, s.blobsDir())
		imp, err := s.importWith(ctx, nil, DefaultConfig(), "fuzzed layers", func(ctx context.Context, stg *stager) error {
			a := newLayerApplier(stg)
			for _, l := range [][]byte{lower, upper} {
				a.touched = map[string]bool{}
				r := &budgetReader{r: bytes.NewReader(l), left: &a.budget}
				if err := a.entries(ctx, tar.NewReader(r)); err != nil {
					return a.readError(ctx, err)
				}
			}
			return nil
		})
		if names := listDir(t, tmp); len(names) != 1 || names[0] != "store" {
			t.Fatalf("files outside the store: %v", names)
		}
		if names := listDir(t, s.stagingDir()); len(names) != 0 {
			t.Fatalf("staging left behind: %v", names)
		}
		if err != nil {
			if blobs := listDir(t, s.blobsDir()); !slices.Equal(blobs, blobsBefore) {
				t.Fatalf("failed import changed the blobs: %v -> %v", blobsBefore, blobs)
			}
			return
		}
		if err := s.Verify(ctx, imp.Digest); err != nil {
			t.Fatalf("imported template does not verify: %v", err)
		}
	})
}
