package oci

import (
	"context"
	"os"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// liveProc is a sandbox's init process as last seen alive: its pid and
// its start time (clock ticks since boot), which together name one process
// even if the pid is reused; the phase it was in (running or paused); and
// the modification times of the runtime's state files then, which change
// when the runtime changes the container's state (runsc rewrites its state
// file on pause and resume).
type liveProc struct {
	pid   int
	start uint64
	phase runtime.Phase
	files map[string]time.Time
}

// cachedPhase reports the phase last seen for id's init process if it is
// still the same live process and nothing changed the container since;
// observing a live sandbox then costs a read of /proc and a stat per
// runtime state file (runc, crun: and a read of its freezer state) instead
// of an exec of the runtime (resync asks every 10 s for every sandbox,
// running or paused). A pause or resume made from outside shows as a
// change (`runc pause`: the freezer state; `runsc pause`: a rewritten
// state file) and falls back to asking the runtime.
func (r *Runtime) cachedPhase(id model.SandboxID) (runtime.Phase, int, bool) {
	r.mu.Lock()
	p, ok := r.live[id]
	r.mu.Unlock()
	if !ok {
		return "", 0, false
	}
	if st, ok := procfs.ReadStat(p.pid); ok && st.Alive() && st.StartTime == p.start && unchanged(p.files) && r.freezerAgrees(id, p.phase) {
		return p.phase, p.pid, true
	}
	r.forgetLive(id)
	return "", 0, false
}

// observe is state, answered from the live cache when it still holds
// (cachedPhase): a pause or resume then costs one exec of the runtime, not
// two.
func (r *Runtime) observe(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	if phase, pid, ok := r.cachedPhase(id); ok {
		return runtime.Status{ID: id, Phase: phase, Pid: pid}, nil
	}
	return r.state(ctx, id)
}

// freezerAgrees reports whether a runc or crun sandbox's freezer state is
// the one of phase (thawed while running, frozen while paused). runsc does
// not pause with the freezer: its state file tells instead.
func (r *Runtime) freezerAgrees(id model.SandboxID, phase runtime.Phase) bool {
	if r.flavor == FlavorRunsc {
		return true
	}
	st, err := r.freezer(id)
	if err != nil {
		r.log.Debug("read freezer state", "sandbox", id, "err", err)
		return false // unsure: ask the runtime
	}
	if phase == runtime.PhasePaused {
		return st == cgroups.Frozen
	}
	return st == cgroups.Thawed
}

// rememberLive records that id's init process pid was seen alive in phase
// (running or paused).
func (r *Runtime) rememberLive(id model.SandboxID, pid int, phase runtime.Phase) {
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
	r.live[id] = liveProc{pid: pid, start: st.StartTime, phase: phase, files: mtimes}
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
