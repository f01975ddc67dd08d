package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// watchMask is what a watch reports about the entries of one directory.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher is an inotify watch on one directory.
type watcher struct {
	dir string // the guest path of the directory
	f   *os.File
	buf []byte
	// networkFS is the network file system the directory is on, or "".
	networkFS string
}

// networkFS names the network file system of statfs type t ("" for any
// other): those E2B's envd refuses to watch unless asked (events on them
// may be unreliable or missing).
func networkFS(t int64) string {
	switch uint32(t) {
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.CIFS_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC:
		return "cifs"
	case unix.SMB_SUPER_MAGIC:
		return "smb"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return ""
}

// watch starts watching directory p (its entries, not recursively). The
// directory is resolved inside the root; inotify then watches the inode
// through the agent's own /proc/self/fd link.
func (r fsRoot) watch(p model.GuestPath) (*watcher, error) {
	fd, err := r.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	netFS := ""
	if err := unix.Fstatfs(fd, &sfs); err == nil {
		netFS = networkFS(int64(sfs.Type))
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask); err != nil {
		// Without /proc: watch by name (the directory was just resolved
		// inside the root; a watch only reads events).
		if _, err2 := unix.InotifyAddWatch(ifd, filepath.Join(r.dir, string(p)), watchMask); err2 != nil {
			unix.Close(ifd)
			return nil, errnoError("watch", string(p), errors.Join(err2, err))
		}
	}
	return &watcher{dir: string(p), f: os.NewFile(uintptr(ifd), "inotify"), buf: make([]byte, 64<<10), networkFS: netFS}, nil
}

// run reads events and hands each to emit until ctx ends, the directory
// goes away or emit fails. It closes the watcher.
func (w *watcher) run(ctx context.Context, emit func(agentproto.FileEvent) error) error {
	stop := context.AfterFunc(ctx, func() { w.f.Close() })
	defer stop()
	defer w.f.Close()
	for {
		n, err := w.f.Read(w.buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read inotify: %w", err)
		}
		evs, end := w.parse(w.buf[:n])
		for _, ev := range evs {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if end {
			return nil
		}
	}
}

// parse decodes one read of inotify events. A rename within the directory
// (IN_MOVED_FROM and IN_MOVED_TO with one cookie) becomes one rename event;
// a move out has only From, a move in only Path. end reports that the
// watched directory itself was removed or moved.
func (w *watcher) parse(b []byte) (evs []agentproto.FileEvent, end bool) {
	pending := map[uint32]int{} // cookie → index of a moved-from event
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(raw.Len)
		if size > len(b) {
			break
		}
		name := string(b[unix.SizeofInotifyEvent:size])
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[size:]
		full := path.Join(w.dir, name)
		isDir := raw.Mask&unix.IN_ISDIR != 0
		switch {
		case raw.Mask&unix.IN_Q_OVERFLOW != 0:
			evs = append(evs, agentproto.FileEvent{Type: "overflow"})
		case raw.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			evs = append(evs, agentproto.FileEvent{Type: agentproto.FileEventRemove, Path: w.dir, IsDir: true})
			return evs, true
		case raw.Mask&unix.IN_CREATE != 0:
			evs = append(evs, agentproto.FileEvent{Type: agentproto.FileEventCreate, Path: full, IsDir: isDir})
		case raw.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
			ev := agentproto.FileEvent{Type: agentproto.FileEventWrite, Path: full}
			if k := len(evs); k > 0 && evs[k-1] == ev {
				continue // a write followed by its close: one event
			}
			evs = append(evs, ev)
		case raw.Mask&unix.IN_DELETE != 0:
			evs = append(evs, agentproto.FileEvent{Type: agentproto.FileEventRemove, Path: full, IsDir: isDir})
		case raw.Mask&unix.IN_MOVED_FROM != 0:
			pending[raw.Cookie] = len(evs)
			evs = append(evs, agentproto.FileEvent{Type: agentproto.FileEventRename, From: full, IsDir: isDir})
		case raw.Mask&unix.IN_MOVED_TO != 0:
			if i, ok := pending[raw.Cookie]; ok {
				evs[i].Path = full
				delete(pending, raw.Cookie)
				continue
			}
			evs = append(evs, agentproto.FileEvent{Type: agentproto.FileEventRename, Path: full, IsDir: isDir})
		}
	}
	return evs, false
}
