package agent

import (
	"fmt"
	"net/http"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/procfs"
)

// handleUsage answers GET /v1/usage: the guest's memory and root
// filesystem use (agentproto.GuestUsage).
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	u, err := guestUsage("/proc/meminfo", "/")
	if err != nil {
		writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// guestUsage reads memory from the meminfo file and disk use from statfs
// of root.
func guestUsage(meminfo, root string) (agentproto.GuestUsage, error) {
	var u agentproto.GuestUsage
	data, err := os.ReadFile(meminfo)
	if err != nil {
		return u, fmt.Errorf("usage: %w", err)
	}
	text := string(data)
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"MemTotal", &u.MemTotal}, {"MemAvailable", &u.MemAvailable}, {"Cached", &u.MemCache}} {
		if *f.dst, err = procfs.SizeField(text, f.name); err != nil {
			return u, fmt.Errorf("usage: %s: %w", meminfo, err)
		}
	}
	if buffers, err := procfs.SizeField(text, "Buffers"); err == nil {
		u.MemCache += buffers
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return u, fmt.Errorf("usage: statfs %s: %w", root, err)
	}
	bs := int64(st.Bsize)
	u.DiskTotal = int64(st.Blocks) * bs
	u.DiskUsed = (int64(st.Blocks) - int64(st.Bfree)) * bs
	return u, nil
}
