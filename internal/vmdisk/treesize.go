package vmdisk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// errNotDir is returned for a tree that is not a directory.
var errNotDir = errors.New("not a directory")

// treeSize is what a directory tree takes in an ext4 filesystem.
type treeSize struct {
	bytes  int64 // data and directory blocks, plus the inodes (inodeSize each)
	inodes int64 // hard links counted once
}

// measureTree walks tree like du: allocated blocks (rounded up to
// BlockSize; a sparse file counts what it allocates), symlinks over 59
// bytes one block, each inode once.
func measureTree(ctx context.Context, tree string) (treeSize, error) {
	st, err := os.Stat(tree)
	if err != nil {
		return treeSize{}, fmt.Errorf("tree: %w", err)
	}
	if !st.IsDir() {
		return treeSize{}, fmt.Errorf("tree %s: %w", tree, errNotDir)
	}
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var ts treeSize
	blocks := func(n int64) int64 { return (n + BlockSize - 1) / BlockSize * BlockSize }
	err = filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sys, _ := info.Sys().(*syscall.Stat_t)
		if sys != nil && sys.Nlink > 1 && !info.IsDir() {
			k := inode{uint64(sys.Dev), sys.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		ts.inodes++
		ts.bytes += inodeSize
		switch {
		case info.Mode().IsRegular():
			n := info.Size()
			if sys != nil && sys.Blocks*512 < n {
				n = sys.Blocks * 512 // sparse: mkfs.ext4 -d keeps the holes
			}
			ts.bytes += blocks(n)
		case info.IsDir():
			ts.bytes += max(blocks(info.Size()), BlockSize)
		case info.Mode()&fs.ModeSymlink != 0 && info.Size() >= 60:
			ts.bytes += BlockSize
		}
		return nil
	})
	if err != nil {
		return treeSize{}, fmt.Errorf("measure tree %s: %w", tree, err)
	}
	return ts, nil
}

// minImageSize is the smallest image that holds the tree: its bytes and
// inodes, the journal, the inode tables (inodeSize per bytesPerInode of the
// image) and some slack for bitmaps, group descriptors and extent blocks.
func (ts treeSize) minImageSize() int64 {
	fixed := ts.bytes + journalMiB<<20 + 4<<20
	bySpace := fixed * 1000 / (1000 - 1000*inodeSize/bytesPerInode - 30) // 1.5% tables, 3% slack
	byInodes := (ts.inodes + 16) * bytesPerInode
	n := max(bySpace, byInodes, MinImageSize)
	return (n + BlockSize - 1) / BlockSize * BlockSize
}
