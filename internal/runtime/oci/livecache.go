package oci

import (
	"os"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
)

// liveProc is a sandbox's init process as last seen running: its pid and
// its start time (clock ticks since boot), which together name one process
// even if the pid is reused; and the modification times of the runtime's
// state files then, which change when the runtime changes the container's
// state (runsc rewrites its state file on pause).
type liveProc struct {
	pid   int
	start uint64
	files map[string]time.Time
}

// cachedRunning reports whether the init process last seen running for id
// is still the same live process and nothing changed the container since;
// observing a running sandbox then costs a read of /proc, a stat per
// runtime state file and one of its freezer state instead of an exec of the
// runtime (resync asks every 10 s for every sandbox). A sandbox paused
// from outside (`runc pause`: a frozen cgroup; `runsc pause`: a rewritten
// state file) falls back to asking the runtime.
func (r *Runtime) cachedRunning(id model.SandboxID) (int, bool) {
	r.mu.Lock()
	p, ok := r.live[id]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	if st, ok := procfs.ReadStat(p.pid); ok && st.Alive() && st.StartTime == p.start && unchanged(p.files) && !r.frozen(id) {
		return p.pid, true
	}
	r.forgetLive(id)
	return 0, false
}

// rememberLive records that id's init process pid was seen running.
func (r *Runtime) rememberLive(id model.SandboxID, pid int) {
	st, ok := procfs.ReadStat(pid)
	if !ok || !st.Alive() {
		return
	}
	files, err := r.runtimeFiles(id)
	if err != nil || len(files) == 0 {
		return
	}
	mtimes := make(map[string]time.Time, len(files))
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return
		}
		mtimes[f] = fi.ModTime()
	}
	r.mu.Lock()
	r.live[id] = liveProc{pid: pid, start: st.StartTime, files: mtimes}
	r.mu.Unlock()
}

// unchanged reports whether every file still has the modification time
// recorded.
func unchanged(files map[string]time.Time) bool {
	for f, mtime := range files {
		fi, err := os.Stat(f)
		if err != nil || !fi.ModTime().Equal(mtime) {
			return false
		}
	}
	return true
}

func (r *Runtime) forgetLive(id model.SandboxID) {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
}
