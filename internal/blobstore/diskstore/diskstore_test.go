package diskstore_test

import (
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/blobstoretest"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
)

func TestConformance(t *testing.T) {
	blobstoretest.Run(t, Harness())
}

// Harness is the conformance harness of diskstore.
func Harness() blobstoretest.Harness {
	return blobstoretest.Harness{
		New: func(t *testing.T) blobstore.Store {
			s, err := diskstore.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Tamper: func(t *testing.T, s blobstore.Store, d blobstore.Digest, content []byte) {
			if err := os.WriteFile(s.(*diskstore.Store).Path(d), content, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, s blobstore.Store) []string {
			names, err := s.(*diskstore.Store).Temps()
			if err != nil {
				t.Fatal(err)
			}
			return names
		},
	}
}
