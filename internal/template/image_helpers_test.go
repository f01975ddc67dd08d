package template

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// capSet returns a revision 2 security.capability value granting the
// capability bit (e.g. 13, CAP_NET_RAW) permitted and effective.
func capSet(bit uint) []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|1) // revision 2, effective
	binary.LittleEndian.PutUint32(b[4:], 1<<bit)       // permitted, low word
	return b
}

// withXattrs returns e carrying the extended attributes as PAX records.
func withXattrs(e tarEntry, kv ...string) tarEntry {
	e.hdr.Format = tar.FormatPAX
	e.hdr.PAXRecords = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		e.hdr.PAXRecords[paxXattrPrefix+kv[i]] = kv[i+1]
	}
	return e
}

func withMode(e tarEntry, mode int64, uid, gid int) tarEntry {
	e.hdr.Mode, e.hdr.Uid, e.hdr.Gid = mode, uid, gid
	return e
}

// whiteoutEntry is a whiteout file as image builders write them.
func whiteoutEntry(name string) tarEntry { return reg(name, "") }

// layerOf makes a gzip-compressed layer of the raw tar bytes.
func layerOf(t testing.TB, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf builds a linux image for platform arch ("" = this host's) with
// the layers (raw tars, lowest first) and the runtime config.
func imageOf(t testing.TB, arch string, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, data := range layers {
		ls = append(ls, layerOf(t, data))
	}
	return imageWithLayers(t, arch, cfg, ls...)
}

// imageWithLayers is imageOf with ready-made layers.
func imageWithLayers(t testing.TB, arch string, cfg v1.Config, ls ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	if arch == "" {
		cf.Architecture = runtime.GOARCH
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// serveRegistry starts go-containerregistry's in-process registry on
// loopback, behind wrap if not nil, and returns its host:port.
func serveRegistry(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// pushImage writes img to the registry at host as repo:tag and returns the
// reference string.
func pushImage(t testing.TB, host, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

func pushIndex(t testing.TB, host, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// writeLayout writes img as the only image of a new OCI layout in dir.
func writeLayout(t testing.TB, dir string, img v1.Image) string {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeDockerArchive writes img as `docker save` would, to file.
func writeDockerArchive(t testing.TB, file string, img v1.Image) string {
	t.Helper()
	tag, err := name.NewTag("airlock.test/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	return file
}

func mustRef(t testing.TB, s string) ImageRef {
	t.Helper()
	r, err := ParseImageRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// importLayout imports img through an OCI layout in a new directory under tmp.
func importLayout(t testing.TB, s *Store, tmp string, img v1.Image) (Imported, error) {
	t.Helper()
	dir, err := os.MkdirTemp(tmp, "layout-")
	if err != nil {
		t.Fatal(err)
	}
	writeLayout(t, dir, img)
	return s.ImportImage(context.Background(), mustRef(t, "oci-layout:"+dir), ImageOptions{}, nil)
}
