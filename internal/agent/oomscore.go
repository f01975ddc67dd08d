package agent

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// DefaultWorkloadOOMScoreAdj is the oom_score_adj the airlock-agent binary
// gives every process it starts (--workload-oom-score-adj), while it keeps
// its own (what the host gave it, 0 by default): in its sandbox's memory
// cgroup the OOM killer then takes any workload process that keeps this
// value before the agent, whatever their sizes (the value adds half the
// cgroup's limit to a process's score), even when what fills the cgroup is
// kernel memory (socket buffers) that no process's size shows.
//
// A workload process can lower its value again, but (without
// CAP_SYS_RESOURCE in the host's user namespace, which no sandbox has) not
// below the oom_score_adj_min it inherited from the agent: at most to the
// agent's own value, where the larger process loses. So a hostile workload
// can make the OOM killer pick the agent, which stops its own sandbox, and
// no more: it cannot make itself unkillable or preferred over other
// sandboxes. Lowering the agent below 0 would need the host's
// CAP_SYS_RESOURCE, and a privileged write sets oom_score_adj_min too,
// which every workload process would inherit and could go down to.
const DefaultWorkloadOOMScoreAdj = 500

// errNoSetfsuid: the kernel has no setfsuid (gVisor), found at an earlier
// start.
var errNoSetfsuid = errors.New("no setfsuid")

// setOOMScoreAdj writes adj into /proc/PID/oom_score_adj of a process the
// agent started (uid: the user it runs as, nil for the agent's). The file
// belongs to the process's user and the agent holds no CAP_DAC_OVERRIDE,
// so for another user it is opened from a thread whose filesystem uid is
// that user's (setfsuid, which CAP_SETUID allows).
//
// It runs right after the start (os.StartProcess returns once the program
// runs: nothing of the agent's runs in the child between fork and exec), so
// what the program forks in its first microseconds keeps the agent's value,
// which any workload process can go back to anyway. Raising the agent's
// own value around the fork instead would make the agent the OOM killer's
// first choice exactly when a fork in a full memory cgroup triggers it.
func setOOMScoreAdj(pid int, uid *uint32, adj int) error {
	path := "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
	val := []byte(strconv.Itoa(adj))
	if uid == nil || *uid == 0 {
		return writeExisting(path, val)
	}
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		prev, err := unix.SetfsuidRetUid(int(*uid))
		if err != nil {
			goruntime.UnlockOSThread()
			done <- fmt.Errorf("setfsuid %d: %w", *uid, err)
			return
		}
		werr := writeExisting(path, val)
		unix.Setfsuid(prev)
		// setfsuid reports nothing: ask for the current value (-1 changes nothing).
		if now, _ := unix.SetfsuidRetUid(-1); now == prev {
			goruntime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine
		done <- werr
	}()
	return <-done
}

// writeExisting writes data to an existing file (a /proc file: no create,
// no truncate).
func writeExisting(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// setWorkloadOOMScore gives a process just started as user (nil: the
// agent's) Options.WorkloadOOMScoreAdj, logging a failure.
func (s *Server) setWorkloadOOMScore(pid int, user *agentproto.User) {
	adj := s.opts.WorkloadOOMScoreAdj
	if adj == 0 {
		return
	}
	var uid *uint32
	if user != nil && user.UID != 0 {
		uid = &user.UID
	}
	err := errNoSetfsuid
	if uid == nil || !s.noSetfsuid.Load() {
		err = setOOMScoreAdj(pid, uid, adj)
	}
	switch {
	case err == nil, errors.Is(err, unix.ESRCH), errors.Is(err, os.ErrNotExist):
		// Set, or the process is gone already.
	case errors.Is(err, errNoSetfsuid):
	case errors.Is(err, unix.ENOSYS) && uid != nil:
		// gVisor has no setfsuid (and no OOM choice among a sandbox's
		// processes: the host kills the whole sandbox).
		if !s.noSetfsuid.Swap(true) {
			s.logger.Info("no setfsuid: processes of other users keep the agent's oom_score_adj", "err", err)
		}
	default:
		s.logger.Warn("set a process's oom_score_adj", "pid", pid, "oom_score_adj", adj, "err", err)
	}
}
