package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/runtimetest"
)

func TestConformance(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.SkipShort(t, "real runc, crun and runsc")
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(string(flavor)); err != nil {
				t.Skipf("needs %s in PATH (install it as .ci/run does)", flavor)
			}
			start := time.Now()
			t.Cleanup(func() { t.Logf("%s conformance suite took %v", flavor, time.Since(start)) })
			runtimetest.Run(t, factory(flavor))
		})
	}
}

// factory returns a runtimetest factory: every call gives a new Runtime,
// and calls for the same test share one configuration.
func factory(flavor Flavor) func(t *testing.T) runtime.Runtime {
	var mu sync.Mutex
	cfgs := map[*testing.T]Config{}
	return func(t *testing.T) runtime.Runtime {
		t.Helper()
		// Unlocked by defer: testConfig may end the goroutine (a skip or
		// a failure), which must not leave the other cases waiting.
		cfg := func() Config {
			mu.Lock()
			defer mu.Unlock()
			cfg, ok := cfgs[t]
			if !ok {
				cfg = testConfig(t, flavor)
				cfgs[t] = cfg
			}
			return cfg
		}()
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return testRuntime{r}
	}
}

// testRuntime exposes a Runtime's host artifacts and crash states to the
// conformance suite.
type testRuntime struct{ *Runtime }

func (r testRuntime) Artifacts(id model.SandboxID) runtimetest.Artifacts {
	cg, _ := r.cgroupPath(id)
	d := r.dirs(id)
	return runtimetest.Artifacts{StateDir: d.state, UpperDir: d.upper, MountPoints: []string{d.rootfs, d.lower, d.meta, d.fs, d.usernsPath}, Cgroup: cg,
		AgentSocket: filepath.Join(d.run, socketName)}
}

func (r testRuntime) CrashStates() []runtimetest.CrashState {
	states := r.commonCrashStates()
	if usesUserns(r.flavor) {
		states = append(states, runtimetest.CrashState{Name: "IDMappedTemplateLeftMounted", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A crash between the idmapped mount of the template and its
			// unmount once the overlay holds it.
			d := r.dirs(spec.ID)
			if err := r.prepare(ctx, spec, d); err != nil {
				return err
			}
			userns, err := os.Open(d.usernsPath) // the sandbox's, bind-mounted by prepare
			if err != nil {
				return err
			}
			defer userns.Close()
			return rootfs.MountIDMapped(spec.RootFS.Lower, d.lower, userns)
		}}, runtimetest.CrashState{Name: "CreatedBeforeWorkloadCgroup", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A crash between the runtime's create and the host's
			// workload cgroup (delegateWorkloadCgroup).
			d := r.dirs(spec.ID)
			if err := r.prepare(ctx, spec, d); err != nil {
				return err
			}
			return r.runDetached(ctx, d.agentLog, netnsOf(spec), "create", "--bundle", d.bundle, "--pid-file", d.pidFile, spec.ID.String())
		}})
	}
	return states
}

func (r testRuntime) commonCrashStates() []runtimetest.CrashState {
	return []runtimetest.CrashState{
		{Name: "HalfWrittenBundle", Make: func(ctx context.Context, spec runtime.Spec) error {
			d := r.dirs(spec.ID)
			if err := os.MkdirAll(d.bundle, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(d.bundle, "config.json.tmp"), []byte(`{"ociVers`), 0o600)
		}},
		{Name: "MountedWithoutContainer", Make: func(ctx context.Context, spec runtime.Spec) error {
			return r.prepare(ctx, spec, r.dirs(spec.ID))
		}},
		{Name: "DiskImageMountedOnly", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A create that crashed after mounting the sandbox's filesystem.
			d := r.dirs(spec.ID)
			if err := os.MkdirAll(d.fs, 0o700); err != nil {
				return err
			}
			if err := rootfs.MakeImage(ctx, d.image, 64<<20); err != nil {
				return err
			}
			return rootfs.MountImage(d.image, d.fs)
		}},
		{Name: "LoopDeviceBoundWithoutMount", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A loop device bound to the image and left so (not autoclear):
			// what another tool, or an older Airlock, may leave.
			d := r.dirs(spec.ID)
			if err := os.MkdirAll(d.state, 0o700); err != nil {
				return err
			}
			if err := rootfs.MakeImage(ctx, d.image, 64<<20); err != nil {
				return err
			}
			return bindLoop(d.image)
		}},
		{Name: "CreatedNeverStarted", Make: func(ctx context.Context, spec runtime.Spec) error {
			return r.Create(ctx, spec)
		}},
		{Name: "ContainerWithoutStateDir", Make: func(ctx context.Context, spec runtime.Spec) error {
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				return err
			}
			d := r.dirs(spec.ID)
			mounts, err := rootfs.MountsUnder(d.state)
			if err != nil {
				return err
			}
			for _, m := range mounts {
				if err := rootfs.Unmount(ctx, r.log, m); err != nil {
					return err
				}
			}
			return os.RemoveAll(d.state)
		}},
		{Name: "RuntimeDeletedMountAndCgroupLeft", Make: func(ctx context.Context, spec runtime.Spec) error {
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				return err
			}
			_, err := r.run(ctx, "delete", "--force", spec.ID.String())
			return err
		}},
		{Name: "CorruptRuntimeState", CreateRefuses: true, Make: func(ctx context.Context, spec runtime.Spec) error {
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				return err
			}
			var file string
			switch r.flavor {
			case FlavorRunc:
				file = filepath.Join(r.rootDir, spec.ID.String(), "state.json")
			case FlavorCrun:
				file = filepath.Join(r.rootDir, spec.ID.String(), "status")
			case FlavorRunsc:
				file = filepath.Join(r.rootDir, spec.ID.String()+"_sandbox:"+spec.ID.String()+".state")
			}
			if _, err := os.Stat(file); err != nil {
				return fmt.Errorf("the runtime's state file moved: %w", err)
			}
			return os.WriteFile(file, []byte(`{"truncat`), 0o600)
		}},
		{Name: "ProcessesInCgroupWithoutContainer", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A runtime that crashed after starting the container's first
			// process but before recording it.
			if err := r.prepare(ctx, spec, r.dirs(spec.ID)); err != nil {
				return err
			}
			cg, err := r.cgroupPath(spec.ID)
			if err != nil {
				return err
			}
			cmd := exec.Command("sleep", "600")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				return err
			}
			go cmd.Wait() // reap it once Delete kills it
			for _, dir := range r.cgroups.Dirs(cg) {
				if strings.Contains(dir, "/cpuset") {
					continue // joining needs cpuset.cpus and cpuset.mems
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
					cmd.Process.Kill()
					return err
				}
			}
			return nil
		}},
	}
}

// helperEnv carries the configuration to TestHelperCreateSandbox.
const helperEnv = "AIRLOCK_OCI_TEST_HELPER"

type helperArgs struct {
	Config Config
	Spec   runtime.Spec
	ProcID string
}

// TestHelperCreateSandbox is not a test: TestSandboxOutlivesItsCreator runs
// the test binary with it to create and start a sandbox from another
// process, which it then kills.
func TestHelperCreateSandbox(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("helper process for TestSandboxOutlivesItsCreator")
	}
	var args helperArgs
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	args.Config.Logger = testLogger(t)
	r, err := New(args.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Create(ctx, args.Spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, args.Spec.ID); err != nil {
		t.Fatal(err)
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, args.Spec.ID) }, testLogger(t))
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: args.ProcID, Args: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute) // killed by the parent long before
}

// TestSandboxOutlivesItsCreator creates a sandbox from a child process,
// SIGKILLs that process, and checks that the sandbox and the process started
// in it keep running and are found by a new Runtime, and that the sandbox
// holds none of the creator's pipes.
func TestSandboxOutlivesItsCreator(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	template := airtest.BusyboxRootfs(t)
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, flavor)
			args := helperArgs{
				Config: Config{Flavor: cfg.Flavor, RootDir: cfg.RootDir, StateRoot: cfg.StateRoot, CgroupParent: cfg.CgroupParent},
				Spec: runtime.Spec{ID: model.NewSandboxID(), RootFS: runtime.RootFS{Lower: template}, AgentBinary: agent,
					Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64}},
				ProcID: model.NewProcessID().String(),
			}
			raw, err := json.Marshal(args)
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			t.Cleanup(func() {
				if err := r.Delete(context.Background(), args.Spec.ID); err != nil {
					t.Errorf("Delete: %v", err)
				}
			})

			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperCreateSandbox$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ready := make(chan bool, 1)
			rest := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				ok := false
				for sc.Scan() {
					if sc.Text() == "ready" {
						ok = true
						break
					}
				}
				ready <- ok
				b, _ := io.ReadAll(stdout) // ends only when every copy of the pipe is closed
				rest <- string(b)
			}()
			if !<-ready {
				cmd.Wait()
				t.Fatalf("helper failed:\n%s", stderr.String())
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-rest:
			case <-time.After(10 * time.Second):
				t.Fatal("the creator's stdout pipe is still open after it died: the sandbox inherited it")
			}
			cmd.Wait()

			st, err := r.State(ctx, args.Spec.ID)
			if err != nil || st.Phase != runtime.PhaseRunning {
				t.Fatalf("State after the creator died = %+v, %v", st, err)
			}
			c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, args.Spec.ID) }, testLogger(t))
			defer c.Close()
			ps, err := c.Status(ctx, args.ProcID)
			if err != nil || !ps.Running {
				t.Fatalf("process started by the creator: %+v, %v", ps, err)
			}
			res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"echo", "alive"}})
			if err != nil || string(res.Stdout) != "alive\n" {
				t.Fatalf("echo = %+v, %v", res, err)
			}
		})
	}
}

// SeccompFiltered: runc and crun sandboxes get a seccomp profile; runsc's
// sentry filters the guest's system calls itself.
func (r testRuntime) SeccompFiltered() bool { return r.flavor != FlavorRunsc }

// bindLoop binds image to a free loop device without LO_FLAGS_AUTOCLEAR, so
// it stays bound after this process closes it.
func bindLoop(image string) error {
	file, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return err
		}
		loop, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &unix.LoopConfig{Fd: uint32(file.Fd())})
		loop.Close()
		if errors.Is(err, unix.EBUSY) && attempt < 32 {
			continue
		}
		return err
	}
}

// UserNamespaced: runc and crun sandboxes get a user namespace with a host
// id range of their own.
func (r testRuntime) UserNamespaced() bool { return usesUserns(r.flavor) }

// The legacy run directory is looked for only where the agent's socket is,
// and only while it exists: the layout itself always names the new one.
func TestAgentRunDir(t *testing.T) {
	state := t.TempDir()
	d := dirsAt(state)
	if d.run != filepath.Join(state, "fs", "meta", "run") || d.agentRunDir() != d.run {
		t.Fatalf("new layout: run %s, agent run dir %s", d.run, d.agentRunDir())
	}
	legacy := filepath.Join(state, "run")
	if err := os.Mkdir(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	if d := dirsAt(state); d.run == legacy || d.agentRunDir() != legacy {
		t.Fatalf("legacy layout: run %s, agent run dir %s", d.run, d.agentRunDir())
	}
}
