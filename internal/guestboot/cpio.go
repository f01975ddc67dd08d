package guestboot

import (
	"fmt"
	"io"
)

// cpio "newc" (SVR4, no CRC) writer: the format the kernel unpacks as an
// initramfs. Entries are written in the order given; every field that could
// vary between builds (mtime, uid, gid, inode numbers, device of the file
// system) is fixed, so the same entries give the same bytes.

const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioChr  = 0o020000
	cpioLink = 0o120000
)

type cpioWriter struct {
	w   io.Writer
	n   int64 // bytes written
	ino uint32
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// entry writes one header, name and data. rdev is (major, minor) for
// device nodes.
func (c *cpioWriter) entry(name string, mode uint32, data []byte, rmaj, rmin uint32) error {
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmaj, rmin, len(name)+1, 0)
	if err := c.write([]byte(hdr)); err != nil {
		return err
	}
	if err := c.write(append([]byte(name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.write(data); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) dir(name string) error { return c.entry(name, cpioDir|0o755, nil, 0, 0) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) error {
	return c.entry(name, cpioReg|perm, data, 0, 0)
}

func (c *cpioWriter) chr(name string, perm, maj, min uint32) error {
	return c.entry(name, cpioChr|perm, nil, maj, min)
}

// close writes the trailer. The kernel needs no padding past it.
func (c *cpioWriter) close() error {
	c.ino = 0
	return c.entry("TRAILER!!!", 0, nil, 0, 0)
}
