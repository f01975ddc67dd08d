package blobstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
)

const emptySHA = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestParseDigest(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{emptySHA, true},
		{"", false},
		{"sha256:", false},
		{strings.ToUpper(emptySHA[:7]) + emptySHA[7:], false},
		{"sha256:" + strings.ToUpper(emptySHA[7:]), false},
		{"sha512:" + emptySHA[7:], false},
		{emptySHA + "0", false},
		{emptySHA[:len(emptySHA)-1], false},
		{emptySHA[:len(emptySHA)-1] + "g", false},
		{"sha256-" + emptySHA[7:], false},
	}
	for _, tc := range tests {
		d, err := blobstore.ParseDigest(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseDigest(%q): %v", tc.in, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Errorf("ParseDigest(%q): %v does not wrap model.ErrInvalid", tc.in, err)
			}
			continue
		}
		if d.String() != tc.in || d.Hex() != tc.in[7:] || d.IsZero() {
			t.Errorf("ParseDigest(%q) = %v", tc.in, d)
		}
	}
}

func TestDigestConversions(t *testing.T) {
	d := blobstore.FromBytes(nil)
	if d.String() != emptySHA {
		t.Fatalf("FromBytes(nil) = %s", d)
	}
	td := d.TemplateDigest()
	if _, err := model.ParseTemplateDigest(string(td)); err != nil {
		t.Fatal(err)
	}
	if back, err := blobstore.FromTemplateDigest(td); err != nil || back != d {
		t.Fatalf("FromTemplateDigest: %v, %v", back, err)
	}
	b, err := json.Marshal(struct{ D blobstore.Digest }{d})
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ D blobstore.Digest }
	if err := json.Unmarshal(b, &out); err != nil || out.D != d {
		t.Fatalf("JSON round trip: %s -> %v, %v", b, out.D, err)
	}
	if err := json.Unmarshal([]byte(`{"D":"sha256:nothex"}`), &out); err == nil {
		t.Fatal("JSON accepted a bad digest")
	}
	var zero blobstore.Digest
	if !zero.IsZero() || zero.Hex() != "" {
		t.Fatal("zero digest")
	}
}

func TestInput(t *testing.T) {
	data := []byte("hello, blob")
	d := blobstore.FromBytes(data)
	tests := []struct {
		name     string
		r        io.Reader
		size     int64
		want     blobstore.Digest
		mismatch bool
		gotSize  int64
	}{
		{"Exact", bytes.NewReader(data), int64(len(data)), d, false, 0},
		{"OneByteReads", iotest.OneByteReader(bytes.NewReader(data)), int64(len(data)), d, false, 0},
		{"DataErrReader", iotest.DataErrReader(bytes.NewReader(data)), int64(len(data)), d, false, 0},
		{"Short", bytes.NewReader(data[:5]), int64(len(data)), d, true, 5},
		{"Long", bytes.NewReader(append(data, '!')), int64(len(data)), d, true, -1},
		{"WrongDigest", bytes.NewReader(data), int64(len(data)), blobstore.FromBytes([]byte("x")), true, int64(len(data))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := blobstore.NewInput(context.Background(), tc.r, tc.want, tc.size)
			got, err := io.ReadAll(in)
			var me *blobstore.MismatchError
			if tc.mismatch {
				if !errors.As(err, &me) || me.GotSize != tc.gotSize {
					t.Fatalf("ReadAll: %v, want a mismatch with GotSize %d", err, tc.gotSize)
				}
				if me.Error() == "" {
					t.Fatal("empty message")
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadAll: %q, %v", got, err)
			}
			if err := in.Finish(); err != nil {
				t.Fatalf("Finish after EOF: %v", err)
			}
		})
	}
	t.Run("ReaderError", func(t *testing.T) {
		boom := errors.New("boom")
		in := blobstore.NewInput(context.Background(), iotest.ErrReader(boom), d, 5)
		if _, err := io.ReadAll(in); !errors.Is(err, boom) {
			t.Fatalf("ReadAll: %v", err)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		c, cancel := context.WithCancel(context.Background())
		cancel()
		in := blobstore.NewInput(c, bytes.NewReader(data), d, int64(len(data)))
		if _, err := io.ReadAll(in); !errors.Is(err, context.Canceled) {
			t.Fatalf("ReadAll: %v", err)
		}
	})
}

func TestVerifyingReader(t *testing.T) {
	data := []byte("stored bytes")
	d := blobstore.FromBytes(data)
	tests := []struct {
		name    string
		stored  []byte
		size    int64
		corrupt bool
	}{
		{"Good", data, int64(len(data)), false},
		{"Flipped", []byte("stored bytez"), int64(len(data)), true},
		{"Shorter", data[:3], int64(len(data)), true},
		{"Longer", append(bytes.Clone(data), 0), int64(len(data)), true},
		{"SizeLies", data[:3], 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			rc := blobstore.VerifyingReader(context.Background(), io.NopCloser(bytes.NewReader(tc.stored)), d, tc.size,
				func(err error) { calls++ })
			_, err := io.ReadAll(rc)
			if tc.corrupt != errors.Is(err, blobstore.ErrCorrupt) || (!tc.corrupt && err != nil) {
				t.Fatalf("ReadAll: %v (corrupt expected: %v)", err, tc.corrupt)
			}
			if _, again := rc.Read(make([]byte, 1)); tc.corrupt && !errors.Is(again, blobstore.ErrCorrupt) {
				t.Fatalf("read after corruption: %v, want ErrCorrupt again", again)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.corrupt]; calls != want {
				t.Fatalf("onCorrupt called %d times, want %d", calls, want)
			}
		})
	}
}
