// Package mountinfo parses the kernel's /proc/<pid>/mountinfo table, which
// lists every mount visible in a mount namespace. It is the source of truth
// for "is this path a mount point" and for finding cgroup hierarchies.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Mount is one line of mountinfo (see proc(5)).
type Mount struct {
	ID           int
	ParentID     int
	Major, Minor int
	Root         string   // path inside the filesystem that forms the root of this mount
	MountPoint   string   // where it is mounted, relative to the process's root
	Options      string   // per-mount options
	Optional     []string // optional fields such as "shared:1"
	FSType       string
	Source       string
	SuperOptions string // per-superblock options
}

// HasSuperOption reports whether opt is one of the comma-separated
// superblock options (e.g. "memory" for a cgroup v1 hierarchy).
func (m Mount) HasSuperOption(opt string) bool {
	for _, o := range strings.Split(m.SuperOptions, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// Read parses the mount table of the calling process.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// maxLine bounds one mountinfo line: two paths of at most PATH_MAX escaped
// (×4) plus options.
const maxLine = 64 * 1024

// Parse reads a mountinfo table.
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		m, err := ParseLine(string(text))
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", line, err)
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return mounts, nil
}

// ParseLine parses one mountinfo line:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func ParseLine(s string) (Mount, error) {
	fields := strings.Split(s, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 10 || sep < 0 || len(fields) < sep+4 {
		return Mount{}, fmt.Errorf("malformed line %q", textclip.Bytes(s, maxEcho))
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(fields[0]); err != nil {
		return Mount{}, fmt.Errorf("bad mount ID %q", textclip.Bytes(fields[0], maxEcho))
	}
	if m.ParentID, err = strconv.Atoi(fields[1]); err != nil {
		return Mount{}, fmt.Errorf("bad parent ID %q", textclip.Bytes(fields[1], maxEcho))
	}
	maj, min, ok := strings.Cut(fields[2], ":")
	if !ok {
		return Mount{}, fmt.Errorf("bad device %q", textclip.Bytes(fields[2], maxEcho))
	}
	if m.Major, err = strconv.Atoi(maj); err != nil {
		return Mount{}, fmt.Errorf("bad device %q", textclip.Bytes(fields[2], maxEcho))
	}
	if m.Minor, err = strconv.Atoi(min); err != nil {
		return Mount{}, fmt.Errorf("bad device %q", textclip.Bytes(fields[2], maxEcho))
	}
	if m.Root, err = Unescape(fields[3]); err != nil {
		return Mount{}, err
	}
	if m.MountPoint, err = Unescape(fields[4]); err != nil {
		return Mount{}, err
	}
	m.Options = fields[5]
	if sep > 6 {
		m.Optional = append([]string(nil), fields[6:sep]...)
	}
	m.FSType = fields[sep+1]
	if m.Source, err = Unescape(fields[sep+2]); err != nil {
		return Mount{}, err
	}
	// Super options are the rest (they never contain spaces, but be lenient).
	m.SuperOptions = strings.Join(fields[sep+3:], " ")
	return m, nil
}

// Unescape decodes the octal escapes (\040 for space, \011, \012, \134) the
// kernel uses for special characters in mountinfo paths.
func Unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+3 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", textclip.Bytes(s, maxEcho))
		}
		v := 0
		for _, d := range []byte(s[i+1 : i+4]) {
			if d < '0' || d > '7' {
				return "", fmt.Errorf("bad escape in %q", textclip.Bytes(s, maxEcho))
			}
			v = v*8 + int(d-'0')
		}
		if v > 0xff {
			return "", fmt.Errorf("bad escape in %q", textclip.Bytes(s, maxEcho))
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// maxEcho is how many bytes of a mountinfo line an error message quotes (textclip.Bytes).
const maxEcho = 120
