package template

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Content hashes of files of published templates, remembered by inode so
// that a build step whose tree links most of its parent's files
// (ImportLayered) hashes only what changed. An entry holds only while the
// inode's size, modification time and change time are what they were
// when it was hashed: a file that was written, or an inode freed and used
// again (by this process or another sharing the store), has another change
// time, which no program can set. A step's own links change the change
// time too; the linker carries the entry over (relink). Verify never reads
// the memo: it hashes every byte.

// maxMemoFiles bounds the remembered hashes (about 100 bytes each); over it
// the memo starts again.
const maxMemoFiles = 1 << 20

type memoKey struct{ dev, ino uint64 }

type memoEntry struct {
	size         int64
	mtime, ctime unix.Timespec
	sum          [32]byte
}

type hashMemo struct {
	mu sync.Mutex
	m  map[memoKey]memoEntry
}

func memoKeyOf(st *unix.Stat_t) memoKey { return memoKey{uint64(st.Dev), st.Ino} }

func (m *hashMemo) entryOf(st *unix.Stat_t, sum [32]byte) memoEntry {
	return memoEntry{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, sum: sum}
}

// lookup returns the hash of the file st describes, if remembered.
func (m *hashMemo) lookup(st *unix.Stat_t) ([32]byte, bool) {
	if m == nil {
		return [32]byte{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[memoKeyOf(st)]
	if !ok || e.size != st.Size || e.mtime != st.Mtim || e.ctime != st.Ctim {
		return [32]byte{}, false
	}
	return e.sum, true
}

// add remembers hashes of a published tree's files.
func (m *hashMemo) add(files map[memoKey]memoEntry) {
	if m == nil || len(files) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m)+len(files) > maxMemoFiles {
		m.m = make(map[memoKey]memoEntry, len(files))
	}
	for k, e := range files {
		m.m[k] = e
	}
}

// relink carries the entry of the file before (stat before a link to it)
// over to after (its stat after the link: a new change time).
func (m *hashMemo) relink(before, after *unix.Stat_t) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memoKeyOf(before)
	e, ok := m.m[k]
	if !ok || memoKeyOf(after) != k || e.size != before.Size || e.mtime != before.Mtim || e.ctime != before.Ctim ||
		after.Size != before.Size || after.Mtim != before.Mtim {
		return
	}
	e.ctime = after.Ctim
	m.m[k] = e
}
