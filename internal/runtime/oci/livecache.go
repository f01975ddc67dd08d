package oci

import (
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
)

// liveProc is a sandbox's init process as last seen running: its pid and
// its start time (clock ticks since boot), which together name one process
// even if the pid is reused.
type liveProc struct {
	pid   int
	start uint64
}

// cachedRunning reports whether the init process last seen running for id
// is still the same live process; observing a running sandbox then costs a
// read of /proc instead of an exec of the runtime (resync asks every 10 s
// for every sandbox). A frozen cgroup (a sandbox paused from outside, e.g.
// by `runc pause`) falls back to asking the runtime.
func (r *Runtime) cachedRunning(id model.SandboxID) (int, bool) {
	r.mu.Lock()
	p, ok := r.live[id]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	if st, ok := procfs.ReadStat(p.pid); ok && st.Alive() && st.StartTime == p.start && !r.frozen(id) {
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
	r.mu.Lock()
	r.live[id] = liveProc{pid: pid, start: st.StartTime}
	r.mu.Unlock()
}

func (r *Runtime) forgetLive(id model.SandboxID) {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
}
