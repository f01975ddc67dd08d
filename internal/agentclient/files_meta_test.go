package agentclient_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

func TestFileMetadata(t *testing.T) {
	c, root, _ := filesAgent(t)
	home := userHome(t, root)
	ctx := context.Background()
	owner := agentclient.AsUser(&agentproto.FileUser{UID: 1000, GID: 1000})
	other := agentclient.AsUser(&agentproto.FileUser{UID: 1001, GID: 1001})
	if err := unix.Setxattr(filepath.Join(home, "mine"), "user.probe", []byte("x"), 0); err != nil {
		t.Skipf("the test's file system keeps no user xattrs: %v", err)
	}

	fi, err := c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/home/mine", Metadata: map[string]string{"Author": "mish", "purpose": "upload"}}, owner)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Metadata["author"] != "mish" || fi.Metadata["purpose"] != "upload" || len(fi.Metadata) != 2 || fi.UID != 1000 || fi.GID != 1000 {
		t.Fatalf("set: %+v", fi)
	}
	// Kept where E2B's envd keeps it; other xattrs are not metadata.
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(filepath.Join(home, "mine"), "user.e2b.author", buf); err != nil || string(buf[:n]) != "mish" {
		t.Fatalf("xattr: %q, %v", buf[:n], err)
	}
	l, err := c.ListDir(ctx, "/home", owner)
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Metadata["author"] != "mish" || l.Entries[0].Metadata["probe"] != "" {
		t.Fatalf("list: %+v, %v", l, err)
	}
	// Set out of band: seen.
	if err := unix.Setxattr(filepath.Join(home, "mine"), "user.e2b.extra", []byte("oob"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err = c.Stat(ctx, "/home/mine", owner); err != nil || fi.Metadata["extra"] != "oob" {
		t.Fatalf("stat: %+v, %v", fi, err)
	}
	// Replacing removes what is not given.
	if fi, err = c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/home/mine", Metadata: map[string]string{"k": "v"}}, owner); err != nil || len(fi.Metadata) != 1 || fi.Metadata["k"] != "v" {
		t.Fatalf("replace: %+v, %v", fi, err)
	}
	// Overwriting the file (a new file renamed over it) clears it.
	if _, err := c.WriteFile(ctx, "/home/mine", -1, strings.NewReader("new"), owner); err != nil {
		t.Fatal(err)
	}
	if fi, err = c.Stat(ctx, "/home/mine", owner); err != nil || fi.Metadata != nil {
		t.Fatalf("after overwrite: %+v, %v", fi, err)
	}

	// Refusals: bad metadata, another user's file, a symlink, a path
	// outside (a symlink to the host's /etc is resolved in the root).
	_, err = c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/home/mine", Metadata: map[string]string{"bad key": "v"}}, owner)
	wantCode(t, "bad key", err, agentproto.CodeInvalidRequest)
	_, err = c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/home/mine", Metadata: map[string]string{"k": "a\nb"}}, owner)
	wantCode(t, "bad value", err, agentproto.CodeInvalidRequest)
	_, err = c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/home/mine", Metadata: map[string]string{"k": "v"}}, other)
	wantCode(t, "another user's file", err, agentproto.CodePermissionDenied)
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: "/link", Metadata: map[string]string{"k": "v"}})
	wantCode(t, "symlink", err, agentproto.CodeUnsupportedFileType)
	if n, err := unix.Getxattr("/etc/hostname", "user.e2b.k", buf); err == nil {
		t.Fatalf("the host's /etc/hostname got metadata %q", buf[:n])
	}
}

// TestMkdirOwner: with an owner, mkdir gives every directory it creates to
// the owner, also under a directory only root may write (staged beside
// it), and leaves nothing else; it never leaves the root.
func TestMkdirOwner(t *testing.T) {
	c, root, outside := filesAgent(t)
	userHome(t, root) // root/.. chmod so that 1000 may pass
	ctx := context.Background()
	if err := os.Mkdir(filepath.Join(root, "rootonly"), 0o755); err != nil {
		t.Fatal(err)
	}
	owner := &agentproto.FileUser{UID: 1000, GID: 1000}
	fi, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/rootonly/a/b", Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if fi.UID != 1000 || fi.GID != 1000 || fi.Mode != 0o755 || fi.Type != agentproto.FileTypeDirectory {
		t.Fatalf("b: %+v", fi)
	}
	for _, p := range []string{"rootonly/a", "rootonly/a/b"} {
		st, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid := ownerOf(t, filepath.Join(root, p)); uid != 1000 || gid != 1000 || st.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %d:%d %v", p, uid, gid, st.Mode())
		}
	}
	ents, err := os.ReadDir(filepath.Join(root, "rootonly"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "a" {
		t.Fatalf("rootonly holds %v (%v): a staging directory was left", ents, err)
	}
	// Existing directories are left as they are.
	if uid, _ := ownerOf(t, filepath.Join(root, "rootonly")); uid != 0 {
		t.Fatalf("rootonly now belongs to %d", uid)
	}

	// Attacker side: a symlinked parent pointing out of the root (absolute
	// and relative) is resolved inside it.
	if err := os.Symlink(outside, filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(root, "rel")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/abs/pwned", "/rel/pwned"} {
		if _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: p, Owner: owner}); err != nil {
			t.Logf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
		t.Fatal("mkdir with an owner created a directory outside the root through a symlink")
	}
	// ".." never reaches the agent as such (paths are clean).
	_, err = c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/rootonly/../../outside/x", Owner: owner})
	wantCode(t, "dot-dot", err, agentproto.CodeInvalidPath)
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("mkdir with an owner created a directory outside the root through ..")
	}
	// Owner and user together are refused.
	_, err = c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/rootonly/z", Owner: owner}, agentclient.AsUser(owner))
	wantCode(t, "owner and user", err, agentproto.CodeInvalidRequest)
}

// TestWatchReadyLocal: a watch of a local directory says it is on no
// network file system.
func TestWatchReadyLocal(t *testing.T) {
	c, root, _ := filesAgent(t)
	if err := os.Mkdir(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Watch(context.Background(), "/w")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if ws.Ready.Type != agentproto.FileEventReady || ws.Ready.NetworkFS != "" {
		t.Fatalf("ready %+v", ws.Ready)
	}
}
