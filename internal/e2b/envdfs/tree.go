package envdfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/model"
)

// maxTreeDirs bounds the directories one recursive watch covers: each is
// one native watch (one stream and one inotify watch in the sandbox).
const maxTreeDirs = 64

// dirItem is one read of the native watch of dir: an event, or the error
// that ended it (io.EOF when the server ended it cleanly).
type dirItem struct {
	dir string
	ev  apiv1.FileEvent
	err error
}

// treeWatch watches a directory (E2B's watchDir): its entries through one
// native watch, and when recursive every directory below it through one
// native watch each, added as directories appear. As with envd's
// recursive fsnotify watch, entries made in a new directory before its
// watch is in place are not reported.
type treeWatch struct {
	ctx       context.Context
	cancel    context.CancelFunc
	c         caller
	root      model.GuestPath
	recursive bool
	items     chan dirItem
	wg        sync.WaitGroup // the feed goroutines

	mu      sync.Mutex
	watches map[string]*client.FileWatch
}

// openTree validates a watch request and opens its native watches; the
// caller must Close it. A directory on a network file system (NFS, CIFS,
// SMB, FUSE: the sandbox's agent says) is refused unless allowNetwork, as
// envd (≥ 0.6.4) refuses it without allow_network_mounts.
func openTree(ctx context.Context, c caller, raw string, recursive, allowNetwork bool) (*treeWatch, error) {
	root, err := c.path(raw)
	if err != nil {
		return nil, err
	}
	fi, err := c.t.Native.StatFile(ctx, c.t.Sandbox, root, c.as())
	if err != nil {
		return nil, nativeError(ctx, "watch "+root.String(), err)
	}
	if fi.Type != apiv1.FileTypeDirectory {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", root))
	}
	ctx, cancel := context.WithCancel(ctx)
	tw := &treeWatch{ctx: ctx, cancel: cancel, c: c, root: root, recursive: recursive, items: make(chan dirItem), watches: map[string]*client.FileWatch{}}
	if err := tw.addTree(root, true); err != nil {
		tw.Close()
		return nil, err
	}
	tw.mu.Lock()
	netFS := ""
	if w := tw.watches[root.String()]; w != nil {
		netFS = w.Ready.NetworkFS
	}
	tw.mu.Unlock()
	if netFS != "" && !allowNetwork {
		tw.Close()
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s is on a network file system (%s), whose events may be unreliable or missing: watch it with allowNetworkMounts", root, netFS))
	}
	return tw, nil
}

// Close stops every native watch and waits for their goroutines.
func (tw *treeWatch) Close() {
	tw.cancel()
	tw.mu.Lock()
	for _, w := range tw.watches {
		w.Close()
	}
	tw.mu.Unlock()
	tw.wg.Wait()
}

// addTree watches dir and, when recursive, the directories below it.
// A directory gone meanwhile is skipped unless must.
func (tw *treeWatch) addTree(dir model.GuestPath, must bool) error {
	if err := tw.add(dir); err != nil {
		if !must && connect.CodeOf(err) == connect.CodeNotFound {
			return nil
		}
		return err
	}
	if !tw.recursive {
		return nil
	}
	l, err := tw.c.t.Native.ListFiles(tw.ctx, tw.c.t.Sandbox, dir, tw.c.as())
	if err != nil {
		if client.IsNotFound(err) && !must {
			return nil
		}
		return nativeError(tw.ctx, "list "+dir.String(), err)
	}
	for _, fi := range l.Entries {
		if fi.Type != apiv1.FileTypeDirectory {
			continue
		}
		sub, err := model.ParseGuestPath(fi.Path)
		if err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("watch %s: entry path: %w", dir, err))
		}
		if err := tw.addTree(sub, false); err != nil {
			return err
		}
	}
	return nil
}

// add opens the native watch of one directory.
func (tw *treeWatch) add(dir model.GuestPath) error {
	tw.mu.Lock()
	_, have := tw.watches[dir.String()]
	n := len(tw.watches)
	tw.mu.Unlock()
	if have {
		return nil
	}
	if n >= maxTreeDirs {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: more than %d directories to watch; watch a smaller tree", tw.root, maxTreeDirs))
	}
	w, err := tw.c.t.Native.WatchFiles(tw.ctx, tw.c.t.Sandbox, dir, tw.c.as())
	if err != nil {
		return nativeError(tw.ctx, "watch "+dir.String(), err)
	}
	tw.mu.Lock()
	if tw.ctx.Err() != nil {
		tw.mu.Unlock()
		w.Close()
		return tw.ctx.Err()
	}
	tw.watches[dir.String()] = w
	tw.wg.Add(1)
	tw.mu.Unlock()
	go tw.feed(dir.String(), w)
	return nil
}

// feed hands the reads of one native watch to items until it ends or the
// tree watch is closed.
func (tw *treeWatch) feed(dir string, w *client.FileWatch) {
	defer tw.wg.Done()
	for {
		ev, err := w.Next()
		select {
		case tw.items <- dirItem{dir: dir, ev: ev, err: err}:
		case <-tw.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// drop forgets the (ended) native watch of dir.
func (tw *treeWatch) drop(dir string) {
	tw.mu.Lock()
	w := tw.watches[dir]
	delete(tw.watches, dir)
	tw.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// errRootGone ends a watch whose directory was removed or moved away.
var errRootGone = errors.New("the watched directory is gone")

// handle turns one read into E2B events, names relative to the root, and
// follows new directories when recursive. errRootGone: the root's watch
// ended (its REMOVE was reported).
func (tw *treeWatch) handle(it dirItem) ([]*filesystempb.FilesystemEvent, error) {
	root := tw.root.String()
	if it.err != nil {
		tw.drop(it.dir)
		switch {
		case it.dir != root:
			return nil, nil // a subdirectory went away; its parent reported it
		case errors.Is(it.err, io.EOF):
			return nil, errRootGone
		}
		return nil, nativeError(tw.ctx, "watch "+root, it.err)
	}
	if it.dir != root && it.ev.Path == it.dir {
		return nil, nil // a subdirectory's own removal: its parent reports it
	}
	evs, err := translate(root, it.ev)
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: %w", root, err))
	}
	if tw.recursive && it.ev.IsDir && it.ev.Path != "" && it.ev.Path != it.dir && (it.ev.Type == "create" || it.ev.Type == "rename") {
		if sub, perr := model.ParseGuestPath(it.ev.Path); perr == nil {
			if err := tw.addTree(sub, false); err != nil {
				return nil, err
			}
		}
	}
	return evs, nil
}
