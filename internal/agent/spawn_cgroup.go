package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Ways a process is put into the workload cgroup (Server.cgroupDir) before
// its first instruction.
const (
	// spawnViaHelper re-executes the agent (SpawnCommand), which joins the
	// cgroup and then execve's the program: works everywhere, but starts
	// a Go binary per process (≈10 ms under gVisor).
	spawnViaHelper = "helper"
	// spawnViaThread (cgroup v1, where membership is per thread): a
	// dedicated, locked OS thread joins the cgroup through its tasks file
	// and forks there; the child inherits the thread's cgroup, and the
	// fork itself is charged to (and limited by) the cgroup's pids.max.
	// The thread returns to the agent's cgroup after the fork, or, where
	// it may not (user namespaces), exits.
	spawnViaThread = "thread"
	// spawnViaCloneInto (cgroup v2): clone3 with CLONE_INTO_CGROUP.
	spawnViaCloneInto = "clone-into-cgroup"
)

// cgroupSpawner starts processes in the workload cgroup, with the cheapest
// mechanism the cgroup's version allows, and falls back to the re-exec
// helper for good the first time that mechanism is refused.
//
// It reaches the cgroup only through descriptors opened when it is made:
// the agent may then make every cgroup mount read-only for the whole
// sandbox (SealMounts) and still move processes, because its descriptors
// stay on the writable mount below.
type cgroupSpawner struct {
	dir   string
	log   *slog.Logger
	mu    sync.Mutex
	mode  string
	dirFD int      // cgroup v2: an O_PATH descriptor of dir (kept for the process's life), else -1
	procs *os.File // dir/cgroup.procs, open for writing: handed to the helper
	tasks *os.File // cgroup v1: dir/tasks, where a spawning thread joins
	home  *os.File // cgroup v1: tasks of the agent's own pids cgroup, where a spawning thread returns; nil: see resident
	// pidsCurrent and pidsMax are dir's pids.current and pids.max, open
	// for reading (nil if they could not be opened): a process that
	// joins the cgroup after its fork (the helper) is started only while
	// the cgroup has room, because a move into a cgroup is not checked
	// against its pids.max (cgroup v1 nor v2).
	pidsCurrent *os.File
	pidsMax     *os.File
	reason      string
	// resident (cgroup v1 without home): the requests of the one spawning
	// thread that lives in the workload cgroup for good; closed by close.
	resident chan spawnRequest
}

// spawnRequest asks the resident spawning thread to start a process.
type spawnRequest struct {
	path string
	argv []string
	attr *os.ProcAttr
	done chan<- spawned
}

// newCgroupSpawner picks the mechanism for dir: the helper if onlyHelper,
// else by the filesystem dir is on. It fails if dir's cgroup.procs cannot
// be opened for writing (then no mechanism works).
func newCgroupSpawner(dir string, onlyHelper bool, log *slog.Logger) (*cgroupSpawner, error) {
	procs, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("workload cgroup: %w", err)
	}
	s := &cgroupSpawner{dir: dir, log: log, mode: spawnViaHelper, dirFD: -1, procs: procs}
	cur, cerr := os.Open(filepath.Join(dir, "pids.current"))
	lim, lerr := os.Open(filepath.Join(dir, "pids.max"))
	if cerr != nil || lerr != nil {
		log.Warn("cannot read the workload cgroup's pids counters: processes that join it after their fork are not checked against its limit",
			"cgroup", dir, "err", errors.Join(cerr, lerr))
		for _, f := range []*os.File{cur, lim} {
			if f != nil {
				f.Close()
			}
		}
	} else {
		s.pidsCurrent, s.pidsMax = cur, lim
	}
	if onlyHelper {
		return s, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		s.reason = err.Error()
		return s, nil
	}
	switch st.Type {
	case unix.CGROUP_SUPER_MAGIC:
		home, version, err := discoverPidsCgroup()
		if err != nil || version != 1 {
			s.reason = fmt.Sprintf("the agent's own pids cgroup: v%d, %v", version, err)
			return s, nil
		}
		tasks, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			s.reason = err.Error()
			return s, nil
		}
		// Under a user namespace the agent's own cgroup stays host
		// root's (so a workload cannot move back into it): a thread that
		// joined the workload cgroup cannot return. Then one thread
		// joins it for good and makes every fork (serveResident).
		homeTasks, err := os.OpenFile(filepath.Join(home, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			s.reason = fmt.Sprintf("spawning threads end after their fork: %v", err)
			homeTasks = nil
		}
		s.mode, s.tasks, s.home = spawnViaThread, tasks, homeTasks
		if homeTasks == nil {
			s.startResident()
		}
	case unix.CGROUP2_SUPER_MAGIC:
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.reason = err.Error()
			return s, nil
		}
		s.mode, s.dirFD = spawnViaCloneInto, fd
	}
	log.Debug("workload cgroup placement", "cgroup", dir, "mechanism", s.mode, "reason", s.reason)
	return s, nil
}

// close releases the spawner's descriptors; it starts nothing afterwards.
func (s *cgroupSpawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resident != nil {
		close(s.resident)
		s.resident = nil
	}
	for _, f := range []*os.File{s.procs, s.tasks, s.home, s.pidsCurrent, s.pidsMax} {
		if f != nil {
			f.Close()
		}
	}
	if s.dirFD >= 0 {
		unix.Close(s.dirFD)
		s.dirFD = -1
	}
}

// current returns the mechanism in use.
func (s *cgroupSpawner) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// fallBack switches to the helper for good.
func (s *cgroupSpawner) fallBack(from string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != from {
		return
	}
	s.mode = spawnViaHelper
	s.log.Warn("cannot start processes directly in the workload cgroup; using the re-exec helper",
		"cgroup", s.dir, "mechanism", from, "err", err)
}

// Failures of a start in the cgroup.
var (
	// errRefused: the mechanism itself failed (not the program); the
	// caller retries with the helper, which is used from now on.
	errRefused = errors.New("cgroup placement refused")
	// errCgroupFull: the fork was refused by the cgroup's pids.max (or
	// another EAGAIN: see pidsLimitError). The start is refused: a
	// process the host starts counts against the workload's limit like
	// any other.
	errCgroupFull = errors.New("workload cgroup at pids.max")
)

// ErrPidsLimit is the error of a start refused because the workload has as
// many processes as its pids limit allows.
var ErrPidsLimit = errors.New("pids limit reached")

// pidsUsage reads the cgroup's pids.current and pids.max; ok is false if
// they cannot be read or the limit is "max".
func (s *cgroupSpawner) pidsUsage() (current, limit int64, ok bool) {
	if s.pidsCurrent == nil {
		return 0, 0, false
	}
	return readPidsCounters(s.pidsCurrent, s.pidsMax)
}

// readPidsCounters reads pids.current and pids.max from open files.
func readPidsCounters(current, limit io.ReaderAt) (int64, int64, bool) {
	read := func(f io.ReaderAt) (int64, bool) {
		var buf [32]byte
		n, err := f.ReadAt(buf[:], 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
		return v, err == nil
	}
	c, ok1 := read(current)
	m, ok2 := read(limit)
	return c, m, ok1 && ok2
}

// checkRoom fails with ErrPidsLimit if the cgroup has no room for one more
// process.
func (s *cgroupSpawner) checkRoom() error {
	if cur, max, ok := s.pidsUsage(); ok && cur >= max {
		return pidsLimitError(cur, max)
	}
	return nil
}

// fdReaderAt reads a descriptor at an offset (the spawn helper's
// inherited pids counters, which it closes itself).
type fdReaderAt int

func (fd fdReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(int(fd), p, off)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func pidsLimitError(current, limit int64) error {
	return fmt.Errorf("%w: the workload has %d processes and threads, its limit is %d", ErrPidsLimit, current, limit)
}

// start starts path with attr (whose Sys must be set) in the cgroup using
// mode, which is spawnViaThread or spawnViaCloneInto. A failure of the
// mechanism wraps errRefused.
func (s *cgroupSpawner) start(mode, path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	switch mode {
	case spawnViaCloneInto:
		s.mu.Lock()
		fd := s.dirFD
		s.mu.Unlock()
		sys := *attr.Sys
		sys.UseCgroupFD, sys.CgroupFD = true, fd
		a := *attr
		a.Sys = &sys
		p, err := os.StartProcess(path, argv, &a)
		return p, classify(err)
	case spawnViaThread:
		done := make(chan spawned, 1)
		s.mu.Lock()
		resident := s.resident
		if resident != nil {
			resident <- spawnRequest{path, argv, attr, done}
		}
		s.mu.Unlock()
		if resident == nil {
			// The fork runs on a locked thread that joins the cgroup for
			// it and returns home after it (a locked thread never clones
			// new runtime threads, so none is born in the cgroup).
			onSpareThread(func() { s.forkOnThread(path, argv, attr, done) })
		}
		r := <-done
		return r.p, r.err
	}
	return nil, fmt.Errorf("%w: unknown mechanism %q", errRefused, mode)
}

// spawned is what a start on a spawning thread gives.
type spawned struct {
	p   *os.Process
	err error
}

// onSpareThread runs fn in a new goroutine locked to an OS thread other
// than the main one. If fn returns still locked, the runtime ends that
// thread; it never ends the main thread (a goroutine that exits locked to
// it wedges it instead), so while the main thread is the one locked, it is
// held and fn runs on another.
func onSpareThread(fn func()) {
	go func() {
		goruntime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		spare := make(chan struct{})
		go func() {
			defer close(spare)
			goruntime.LockOSThread()
			fn()
		}()
		<-spare
		goruntime.UnlockOSThread()
	}()
}

// startResident starts the resident spawning thread.
func (s *cgroupSpawner) startResident() {
	s.resident = make(chan spawnRequest)
	onSpareThread(func() { s.serveResident(s.resident) })
}

// serveResident runs on a locked spare thread: it joins the workload
// cgroup for good and starts every process asked of it there, until close.
// The thread counts against the cgroup's pids.max. It returns locked, so
// the runtime ends the thread.
func (s *cgroupSpawner) serveResident(reqs <-chan spawnRequest) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	_, joinErr := s.tasks.Write(tid)
	if joinErr != nil {
		joinErr = fmt.Errorf("%w: join %s with thread %s: %w", errRefused, s.dir, tid, joinErr)
	}
	for req := range reqs {
		if joinErr != nil {
			req.done <- spawned{err: joinErr}
			continue
		}
		p, err := os.StartProcess(req.path, req.argv, req.attr)
		req.done <- spawned{p, classify(err)}
	}
}

// forkOnThread runs on a goroutine locked to a thread other than the main
// one: the thread joins the workload cgroup, forks there and goes back to
// the agent's cgroup, unlocking; if it cannot go back, it returns still
// locked, so that the runtime ends the thread when its goroutine ends.
func (s *cgroupSpawner) forkOnThread(path string, argv []string, attr *os.ProcAttr, done chan<- spawned) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	if _, err := s.tasks.Write(tid); err != nil {
		goruntime.UnlockOSThread()
		done <- spawned{err: fmt.Errorf("%w: join %s with thread %s: %w", errRefused, s.dir, tid, err)}
		return
	}
	p, err := os.StartProcess(path, argv, attr)
	// Back home before answering: when start returns, no thread of the
	// agent is left in the workload cgroup (nor counts against its limit).
	// A thread that cannot go back stays locked and so ends.
	if _, herr := s.home.Write(tid); herr != nil {
		s.log.Warn("a spawning thread could not leave the workload cgroup; ending it", "tid", string(tid), "err", herr)
	} else {
		goruntime.UnlockOSThread()
	}
	done <- spawned{p, classify(err)}
}

// classify wraps a start error in errCgroupFull if the fork hit pids.max,
// or in errRefused if it means clone3 or CLONE_INTO_CGROUP is unsupported
// (an execve error of the program that looks alike is reported by the
// helper's retry).
func classify(err error) error {
	var errno syscall.Errno
	if err == nil || !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.EAGAIN:
		return fmt.Errorf("%w: %w", errCgroupFull, err)
	case unix.ENOSYS, unix.EOPNOTSUPP, unix.EBADF, unix.EINVAL:
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	return err
}
