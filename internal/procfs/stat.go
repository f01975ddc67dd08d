// Package procfs reads what Airlock needs from the host's /proc: a
// process's state, parent and start time (state and start time together
// name one process even when its pid is reused).
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is the part of /proc/PID/stat that Airlock reads.
type Stat struct {
	State     byte   // R, S, D, Z, X, …
	PPid      int    // the parent's pid
	StartTime uint64 // clock ticks after boot
}

// Alive reports whether the process is neither a zombie nor dead.
func (s Stat) Alive() bool { return s.State != 'Z' && s.State != 'X' && s.State != 'x' }

// ReadStat reads /proc/PID/stat; ok is false if there is no such process
// (or its stat cannot be parsed).
func ReadStat(pid int) (st Stat, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, false
	}
	return ParseStat(string(data))
}

// Alive reports whether pid is a live (not zombie) process.
func Alive(pid int) bool {
	st, ok := ReadStat(pid)
	return ok && st.Alive()
}

// ParseStat parses the contents of /proc/PID/stat. The command name (field
// 2) may contain spaces and parentheses, so fields are counted from the
// last ")": field 3 is the state, field 4 the parent's pid, field 22 the
// start time.
func ParseStat(s string) (Stat, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPid: ppid, StartTime: start}, true
}
