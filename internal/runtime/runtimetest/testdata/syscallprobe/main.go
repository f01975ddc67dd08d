// Command syscallprobe is a test-only helper of the runtime conformance
// suite, built static and copied into the sandbox template: it makes system
// calls that a sandbox's seccomp filter must refuse and prints one line per
// call, "name: ok" or "name: ERRNO".
//
// With the argument "agent PID" it plays a workload that tampers with the
// guest agent (process PID) instead: ptrace attach, reading its memory,
// environment and descriptors. With "agentsock PATH" it speaks the agent
// protocol to the Unix socket PATH as the host would (info, list, start,
// release), with "vports" it opens every virtio-serial port (a VM's agent
// channel), one line each: "name: ok" or the error; with "agentflood PATH
// SECONDS" it connects to PATH from 8 goroutines as fast as it can for
// that long and prints how many connections it made. With "pipes" it fills
// kernel memory that no process's size shows: pipes, each holding 64 KiB,
// until a write or a pipe fails (or it is killed); it prints how many. With "fork N" it starts N `sleep 20`s,
// going on after failed forks (unlike a shell), and prints
// "started S failed F"; with "fork N hold" it then stays 20 s itself. With
// "inotify N" it creates up to N inotify instances, stopping at the first
// failure, and prints "created C failed ERRNO" ("failed none" if all were
// made); with "inotify N hold" it then holds them for 60 s.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "agent" {
		probeAgent(os.Args[2])
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "agentsock" {
		probeAgentSocket(os.Args[2])
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "agentflood" {
		floodAgentSocket(os.Args[2], os.Args[3])
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "pipes" {
		fillPipes()
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "vports" {
		probeVports()
		return
	}
	if len(os.Args) >= 3 && os.Args[1] == "fork" {
		forkMany(os.Args[2])
		if len(os.Args) == 4 && os.Args[3] == "hold" {
			time.Sleep(20 * time.Second)
		}
		return
	}
	if len(os.Args) >= 3 && os.Args[1] == "inotify" {
		inotifyMany(os.Args[2])
		if len(os.Args) == 4 && os.Args[3] == "hold" {
			time.Sleep(60 * time.Second)
		}
		return
	}
	var uring [120]byte // struct io_uring_params
	var perf unix.PerfEventAttr
	perf.Type = unix.PERF_TYPE_SOFTWARE
	perf.Size = uint32(unsafe.Sizeof(perf))
	perf.Config = unix.PERF_COUNT_SW_CPU_CLOCK
	session, process := unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_PROCESS_KEYRING // negative: sign-extended
	keyType, desc, payload := []byte("user\x00"), []byte("airlock-probe\x00"), []byte("x")
	calls := []struct {
		name string
		call func() (uintptr, syscall.Errno)
	}{
		{"io_uring_setup", func() (uintptr, syscall.Errno) {
			return raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&uring[0])), 0)
		}},
		{"keyctl", func() (uintptr, syscall.Errno) {
			return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(session), 0)
		}},
		{"add_key", func() (uintptr, syscall.Errno) {
			r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&keyType[0])), uintptr(unsafe.Pointer(&desc[0])),
				uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(process), 0)
			return r, e
		}},
		{"perf_event_open", func() (uintptr, syscall.Errno) {
			r, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&perf)), 0, ^uintptr(0), ^uintptr(0), 0, 0)
			return r, e
		}},
		{"bpf", func() (uintptr, syscall.Errno) { return raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) }},
		{"userfaultfd", func() (uintptr, syscall.Errno) { return raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0) }},
		{"unshare(CLONE_NEWUSER)", func() (uintptr, syscall.Errno) { return raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0) }},
		{"clone(CLONE_NEWUSER)", func() (uintptr, syscall.Errno) {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
			err := cmd.Run()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return 0, errno
			}
			if err != nil {
				return 0, syscall.EIO
			}
			return 0, 0
		}},
	}
	for _, c := range calls {
		r, errno := c.call()
		if errno == 0 {
			fmt.Printf("%s: ok\n", c.name)
			if c.name != "keyctl" && c.name != "add_key" && c.name != "clone(CLONE_NEWUSER)" && c.name != "unshare(CLONE_NEWUSER)" {
				unix.Close(int(r))
			}
			continue
		}
		fmt.Printf("%s: %s\n", c.name, unix.ErrnoName(errno))
	}
}

func raw(trap, a1, a2, a3 uintptr) (uintptr, syscall.Errno) {
	r, _, e := unix.Syscall(trap, a1, a2, a3)
	return r, e
}

// probeAgent tries to reach into process pid, one line per attempt.
func probeAgent(pid string) {
	report := func(name string, err error) {
		var errno syscall.Errno
		switch {
		case err == nil:
			fmt.Printf("%s: ok\n", name)
		case errors.As(err, &errno):
			fmt.Printf("%s: %s\n", name, unix.ErrnoName(errno))
		default:
			fmt.Printf("%s: %v\n", name, err)
		}
	}
	var n int
	if _, err := fmt.Sscan(pid, &n); err != nil {
		fmt.Println("bad pid:", err)
		os.Exit(2)
	}
	err := unix.PtraceAttach(n)
	if err == nil {
		var ws unix.WaitStatus
		unix.Wait4(n, &ws, unix.WALL, nil)
		unix.PtraceDetach(n)
	}
	report("ptrace(PTRACE_ATTACH)", err)
	report("ptrace(PTRACE_SEIZE)", seize(n))
	report("read /proc/PID/mem", readMem(n))
	_, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", n))
	report("read /proc/PID/environ", err)
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/0", n))
	if err == nil {
		f.Close()
	}
	report("open /proc/PID/fd/0", err)
	_, err = os.Readlink(fmt.Sprintf("/proc/%d/fd/0", n))
	report("readlink /proc/PID/fd/0", err)
	report("pidfd_getfd", getFD(n))
}

func seize(pid int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	unix.PtraceDetach(pid)
	return nil
}

func readMem(pid int) error {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return err
	}
	defer f.Close()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return err
	}
	var lo uint64
	if _, err := fmt.Sscanf(string(maps), "%x-", &lo); err != nil {
		return fmt.Errorf("parse maps: %w", err)
	}
	_, err = f.ReadAt(make([]byte, 16), int64(lo))
	return err
}

func getFD(pid int) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, 0, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// forkMany starts n sleeps and counts the forks that fail.
func forkMany(n string) {
	var count int
	if _, err := fmt.Sscan(n, &count); err != nil {
		fmt.Println("bad count:", err)
		os.Exit(2)
	}
	started, failed := 0, 0
	for i := 0; i < count; i++ {
		if _, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "20"}, &syscall.ProcAttr{}); err != nil {
			failed++
			continue
		}
		started++
	}
	fmt.Printf("started %d failed %d\n", started, failed)
}

// inotifyMany creates up to n inotify instances (kept open) and reports
// how many it made and why it stopped.
func inotifyMany(n string) {
	var count int
	if _, err := fmt.Sscan(n, &count); err != nil {
		fmt.Println("bad count:", err)
		os.Exit(2)
	}
	created, failed := 0, "none"
	for ; created < count; created++ {
		if _, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				failed = unix.ErrnoName(errno)
			} else {
				failed = err.Error()
			}
			break
		}
	}
	fmt.Printf("created %d failed %s\n", created, failed)
}

// probeAgentSocket speaks to the agent's socket as the host does (HTTP/2
// with prior knowledge), each request on a fresh connection: "name: ok"
// for an answer with the status the host would get, else what happened.
func probeAgentSocket(path string) {
	ops := []struct {
		name, method, path, body string
		want                     int
	}{
		{"info", "GET", "/v1/info", "", http.StatusOK},
		{"list", "GET", "/v1/processes", "", http.StatusOK},
		{"start", "POST", "/v1/processes", `{"id":"` + model.NewProcessID().String() + `","args":["true"]}`, http.StatusCreated},
		{"release", "POST", "/v1/listener/release", "", http.StatusNoContent},
	}
	for _, op := range ops {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, op.method, "http://agent"+op.path, strings.NewReader(op.body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			var resp *http.Response
			if resp, err = tr.RoundTrip(req); err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
				resp.Body.Close()
				if resp.StatusCode != op.want {
					err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
				}
			}
		}
		cancel()
		tr.CloseIdleConnections()
		if err == nil {
			fmt.Printf("%s: ok\n", op.name)
		} else {
			fmt.Printf("%s: %s\n", op.name, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
}

// probeVports opens every virtio-serial port device.
func probeVports() {
	devs, _ := filepath.Glob("/dev/vport*")
	if len(devs) == 0 {
		fmt.Println("no /dev/vport* devices")
		return
	}
	for _, d := range devs {
		f, err := os.OpenFile(d, os.O_RDWR|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err == nil {
			f.Close()
			fmt.Printf("open %s: ok\n", d)
			continue
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fmt.Printf("open %s: %s\n", d, unix.ErrnoName(errno))
		} else {
			fmt.Printf("open %s: %v\n", d, err)
		}
	}
}

// fillPipes fills pipes (kernel memory, charged to the memory cgroup) until
// something fails, then holds them for 30 s.
func fillPipes() {
	chunk := make([]byte, 64<<10)
	n := 0
	for ; n < 1<<16; n++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			fmt.Printf("pipe %d: %v\n", n, err)
			break
		}
		if _, err := unix.Write(p[1], chunk); err != nil {
			fmt.Printf("write %d: %v\n", n, err)
			break
		}
	}
	fmt.Printf("filled %d pipes (%d MiB)\n", n, n/16)
	time.Sleep(30 * time.Second)
}

// floodAgentSocket connects to path and closes at once, from 8 goroutines,
// for secs seconds.
func floodAgentSocket(path, secs string) {
	var n int
	if _, err := fmt.Sscan(secs, &n); err != nil {
		fmt.Println("bad seconds:", err)
		os.Exit(2)
	}
	end := time.Now().Add(time.Duration(n) * time.Second)
	counts := make(chan int)
	for range 8 {
		go func() {
			n := 0
			for time.Now().Before(end) {
				if c, err := net.Dial("unix", path); err == nil {
					c.Close()
					n++
				}
			}
			counts <- n
		}()
	}
	total := 0
	for range 8 {
		total += <-counts
	}
	fmt.Printf("connected %d times\n", total)
}
