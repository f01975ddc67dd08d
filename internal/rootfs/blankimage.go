package rootfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Images makes the images MakeImage makes without running mkfs.ext4 for each
// (an exec and its writes: tens of milliseconds on a create's path, more on
// a busy host). The first image of each size is made by mkfs.ext4 and its
// few hundred KiB of data extents are kept in memory as that size's blank;
// every image after it is a sparse file of the size with the blank's
// extents written into it and a new identity: a random UUID and directory
// hash seed in its superblock, as mkfs.ext4 would have picked. That needs
// the blank's checksums not to depend on its UUID (metadata_csum_seed, as
// MakeImage makes it); a blank that does not allow it is not kept, and
// its size is made by mkfs.ext4 each time. The zero Images is ready to use.
type Images struct {
	mu     sync.Mutex
	blanks map[int64]*blankImage // nil: mkfs.ext4 for that size
}

// maxBlanks bounds the sizes Images keeps a blank for; images of other
// sizes are made by mkfs.ext4.
const maxBlanks = 8

// blankImage is an empty filesystem's data: its extents, in order.
type blankImage struct {
	extents []extent
}

type extent struct {
	off  int64
	data []byte
}

// Make creates image, which must not exist, as MakeImage does.
func (m *Images) Make(ctx context.Context, image string, size int64) error {
	if size < MinImageSize {
		return fmt.Errorf("make image %s: size %d is below the minimum of %d bytes", image, size, MinImageSize)
	}
	size = (size + ImageBlockSize - 1) / ImageBlockSize * ImageBlockSize
	b, err := m.blank(ctx, image, size)
	if err != nil {
		return err
	}
	if b == nil {
		return MakeImage(ctx, image, size)
	}
	return b.write(image, size)
}

// blank returns the blank of size, making it (with a scratch image next to
// image) the first time; nil if that size is made by mkfs.ext4.
func (m *Images) blank(ctx context.Context, image string, size int64) (*blankImage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.blanks[size]; ok {
		return b, nil
	}
	if len(m.blanks) >= maxBlanks {
		return nil, nil
	}
	scratch := image + ".blank"
	_ = os.Remove(scratch) // a crashed attempt's
	if err := MakeImage(ctx, scratch, size); err != nil {
		return nil, err
	}
	defer os.Remove(scratch)
	b, err := readBlank(scratch)
	if err != nil {
		return nil, fmt.Errorf("make image %s: read the blank filesystem: %w", image, err)
	}
	if err := checkIdentityRenewable(b); err != nil {
		b = nil // made by mkfs.ext4 from now on
	}
	if m.blanks == nil {
		m.blanks = map[int64]*blankImage{}
	}
	m.blanks[size] = b
	return b, nil
}

// readBlank reads the data extents of the sparse file path
// (SEEK_DATA/SEEK_HOLE).
func readBlank(path string) (*blankImage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var b blankImage
	fd := int(f.Fd())
	for off := int64(0); off < fi.Size(); {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, fmt.Errorf("seek data in %s: %w", path, err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole in %s: %w", path, err)
		}
		data := make([]byte, end-start)
		if _, err := f.ReadAt(data, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		b.extents = append(b.extents, extent{off: start, data: data})
		off = end
	}
	return &b, nil
}

// write creates image as a sparse file of size with the blank's extents,
// its superblock given a new identity.
func (b *blankImage) write(image string, size int64) (err error) {
	f, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("make image: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("make image %s: %w", image, cerr)
		}
	}()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("make image %s: %w", image, err)
	}
	for _, e := range b.extents {
		data := e.data
		if e.off <= superblockOffset && superblockOffset+superblockSize <= e.off+int64(len(data)) {
			data = append([]byte(nil), data...)
			sb := data[superblockOffset-e.off:][:superblockSize]
			if err := renewIdentity(sb); err != nil {
				return fmt.Errorf("make image %s: %w", image, err)
			}
		}
		if _, err := f.WriteAt(data, e.off); err != nil {
			return fmt.Errorf("make image %s: %w", image, err)
		}
	}
	return nil
}

// The ext4 primary superblock and the fields Images changes (see the
// kernel's struct ext4_super_block).
const (
	superblockOffset = 1024
	superblockSize   = 1024

	sbMagic       = 0x38  // le16
	sbIncompat    = 0x60  // le32
	sbROCompat    = 0x64  // le32
	sbUUID        = 0x68  // [16]byte
	sbHashSeed    = 0xEC  // [4]le32
	sbChecksumTyp = 0x175 // u8, 1: crc32c
	sbChecksum    = 0x3FC // le32: crc32c of the bytes before it

	ext4Magic            = 0xEF53
	incompatCsumSeed     = 0x2000
	roCompatMetadataCsum = 0x400
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// superblockChecksum is the ext4 superblock checksum: the kernel's
// crc32c(~0, …) without the final inversion that hash/crc32 applies.
func superblockChecksum(sb []byte) uint32 {
	return ^crc32.Checksum(sb[:sbChecksum], castagnoli)
}

// checkIdentityRenewable checks that the blank's superblock is one whose
// UUID and hash seed renewIdentity may change: ext4, its metadata checksums
// seeded by a stored seed rather than the UUID, its own checksum the one
// superblockChecksum computes.
func checkIdentityRenewable(b *blankImage) error {
	for _, e := range b.extents {
		if e.off <= superblockOffset && superblockOffset+superblockSize <= e.off+int64(len(e.data)) {
			sb := e.data[superblockOffset-e.off:][:superblockSize]
			le := binary.LittleEndian
			switch {
			case le.Uint16(sb[sbMagic:]) != ext4Magic:
				return errors.New("not an ext4 superblock")
			case le.Uint32(sb[sbIncompat:])&incompatCsumSeed == 0 || le.Uint32(sb[sbROCompat:])&roCompatMetadataCsum == 0:
				return errors.New("checksums not seeded apart from the UUID (metadata_csum_seed)")
			case sb[sbChecksumTyp] != 1 || le.Uint32(sb[sbChecksum:]) != superblockChecksum(sb):
				return errors.New("unexpected superblock checksum")
			}
			return nil
		}
	}
	return errors.New("no superblock in the blank's data")
}

// renewIdentity gives the superblock sb a random UUID and directory hash
// seed and updates its checksum.
func renewIdentity(sb []byte) error {
	if _, err := rand.Read(sb[sbUUID : sbUUID+16]); err != nil {
		return fmt.Errorf("new filesystem UUID: %w", err)
	}
	sb[sbUUID+6] = sb[sbUUID+6]&0x0f | 0x40 // version 4 (random), as mkfs's
	sb[sbUUID+8] = sb[sbUUID+8]&0x3f | 0x80
	if _, err := rand.Read(sb[sbHashSeed : sbHashSeed+16]); err != nil {
		return fmt.Errorf("new directory hash seed: %w", err)
	}
	binary.LittleEndian.PutUint32(sb[sbChecksum:], superblockChecksum(sb))
	return nil
}
