package oci

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// liveProc is a sandbox's init process as last seen running: its pid and
// its start time (clock ticks since boot), which together name one process
// even if the pid is reused.
type liveProc struct {
	pid   int
	start uint64
}

// procStat reads a process's state letter and start time from
// /proc/PID/stat; ok is false if there is no such process.
func procStat(pid int) (state byte, start uint64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	return parseProcStat(string(data))
}

// parseProcStat parses /proc/PID/stat after the command name (which may
// contain spaces and parentheses): field 3 is the state, field 22 the
// start time.
func parseProcStat(s string) (state byte, start uint64, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], start, true
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X' && state != 'x'
}

// cachedRunning reports whether the init process last seen running for id
// is still the same live process; observing a running sandbox then costs a
// read of /proc instead of an exec of the runtime (resync asks every 10 s
// for every sandbox).
func (r *Runtime) cachedRunning(id model.SandboxID) (int, bool) {
	r.mu.Lock()
	p, ok := r.live[id]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	state, start, alive := procStat(p.pid)
	if alive && start == p.start && state != 'Z' && state != 'X' && state != 'x' {
		return p.pid, true
	}
	r.forgetLive(id)
	return 0, false
}

// rememberLive records that id's init process pid was seen running.
func (r *Runtime) rememberLive(id model.SandboxID, pid int) {
	state, start, ok := procStat(pid)
	if !ok || state == 'Z' || state == 'X' || state == 'x' {
		return
	}
	r.mu.Lock()
	r.live[id] = liveProc{pid: pid, start: start}
	r.mu.Unlock()
}

func (r *Runtime) forgetLive(id model.SandboxID) {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
}
