package agent

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestNetworkFS(t *testing.T) {
	for _, tc := range []struct {
		magic int64
		want  string
	}{
		{unix.NFS_SUPER_MAGIC, "nfs"},
		{unix.CIFS_SUPER_MAGIC, "cifs"},
		{unix.SMB2_SUPER_MAGIC, "cifs"},
		{unix.SMB_SUPER_MAGIC, "smb"},
		{unix.FUSE_SUPER_MAGIC, "fuse"},
		{unix.EXT4_SUPER_MAGIC, ""},
		{unix.TMPFS_MAGIC, ""},
		{unix.OVERLAYFS_SUPER_MAGIC, ""},
	} {
		if got := networkFS(tc.magic); got != tc.want {
			t.Errorf("networkFS(%#x) = %q, want %q", tc.magic, got, tc.want)
		}
	}
}
