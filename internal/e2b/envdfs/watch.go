package envdfs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/keepalive"
	"github.com/airlockdev/airlock/internal/model"
)

// uploadTempPrefix starts the names of the temporary files the sandbox
// agent writes an upload into before renaming it over its target; their
// events are the agent's, not the user's, and are not reported.
const uploadTempPrefix = ".airlock-upload-"

// keepaliveInterval is WatchDir's keepalive interval: the
// Keepalive-Ping-Interval header's, or the default when the header is bad
// (where Start and Connect refuse the call, WatchDir goes on).
func keepaliveInterval(h http.Header) time.Duration {
	d, err := keepalive.Parse(h.Get(keepalive.Header))
	if err != nil {
		return keepalive.Default
	}
	return d
}

// relName is p relative to the watched directory dir ("." for dir itself),
// as envd's filepath.Rel gives it.
func relName(dir, p string) string {
	switch {
	case p == dir:
		return "."
	case dir == "/":
		return strings.TrimPrefix(p, "/")
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rest
	}
	return p
}

func isUploadTemp(p string) bool { return strings.HasPrefix(path.Base(p), uploadTempPrefix) }

// errOverflow is a native watch that lost events.
var errOverflow = errors.New("the sandbox's watch lost events (too many changes at once)")

// translate maps one native watch event to E2B's, following envd's
// fsnotify semantics: a move within or into the directory is CREATE of the
// new name, a move away RENAME of the old name. An upload (written to a
// temporary name, then renamed over its target) is CREATE and WRITE of the
// target. Events of upload temporaries are dropped.
func translate(dir string, ev apiv1.FileEvent) ([]*filesystempb.FilesystemEvent, error) {
	mk := func(t filesystempb.EventType, p string) *filesystempb.FilesystemEvent {
		return &filesystempb.FilesystemEvent{Name: relName(dir, p), Type: t}
	}
	switch ev.Type {
	case "overflow":
		return nil, errOverflow
	case "create", "write", "remove":
		if ev.Path == "" || isUploadTemp(ev.Path) {
			return nil, nil
		}
		t := map[string]filesystempb.EventType{
			"create": filesystempb.EventType_EVENT_TYPE_CREATE,
			"write":  filesystempb.EventType_EVENT_TYPE_WRITE,
			"remove": filesystempb.EventType_EVENT_TYPE_REMOVE,
		}[ev.Type]
		return []*filesystempb.FilesystemEvent{mk(t, ev.Path)}, nil
	case "rename":
		var out []*filesystempb.FilesystemEvent
		fromTemp := ev.From != "" && isUploadTemp(ev.From)
		if ev.From != "" && !fromTemp {
			out = append(out, mk(filesystempb.EventType_EVENT_TYPE_RENAME, ev.From))
		}
		if ev.Path != "" && !isUploadTemp(ev.Path) {
			out = append(out, mk(filesystempb.EventType_EVENT_TYPE_CREATE, ev.Path))
			if fromTemp {
				out = append(out, mk(filesystempb.EventType_EVENT_TYPE_WRITE, ev.Path))
			}
		}
		return out, nil
	}
	return nil, nil // "ready" and types this translator does not know
}

// addEntries describes each event's entry (include_entry). An entry gone
// by then (removed, renamed away) is left out.
func addEntries(ctx context.Context, c caller, dir string, evs []*filesystempb.FilesystemEvent) error {
	for _, e := range evs {
		if e.Type == filesystempb.EventType_EVENT_TYPE_REMOVE || e.Type == filesystempb.EventType_EVENT_TYPE_RENAME {
			continue
		}
		p := dir
		if e.Name != "." {
			p = path.Join(dir, e.Name)
		}
		fi, err := c.t.Native.StatFile(ctx, c.t.Sandbox, model.GuestPath(p), c.as())
		switch {
		case client.IsNotFound(err):
		case err != nil:
			return nativeError(ctx, "stat "+p, err)
		default:
			e.Entry = c.entry(fi)
		}
	}
	return nil
}

// WatchDir streams the changes of a directory's entries: start, then
// filesystem events, with keepalives after Keepalive-Ping-Interval seconds
// of silence. It ends when the client goes away or the directory does.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return err
	}
	tw, err := openTree(ctx, c, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return err
	}
	defer tw.Close()
	dir := tw.root

	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return fmt.Errorf("send start: %w", err)
	}
	interval := keepaliveInterval(req.Header())
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return fmt.Errorf("send keepalive: %w", err)
			}
		case it := <-tw.items:
			evs, err := tw.handle(it)
			if errors.Is(err, errRootGone) {
				return nil // its REMOVE was sent
			}
			if err != nil {
				return err
			}
			if req.Msg.GetIncludeEntry() {
				if err := addEntries(ctx, c, dir.String(), evs); err != nil {
					return err
				}
			}
			for _, e := range evs {
				if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: e}}); err != nil {
					return fmt.Errorf("send event: %w", err)
				}
			}
			if len(evs) > 0 {
				ticker.Reset(interval)
			}
		}
	}
}
