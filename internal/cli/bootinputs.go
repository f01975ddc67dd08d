package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/guestboot"
)

// bootInputsCommand builds the microVM environment's guest kernel and
// initramfs (spike: into a cache directory; the content store comes with
// the QEMU runtime).
func (a *app) bootInputsCommand() *cobra.Command {
	var dir, initBin, agentBin string
	var uncompressed bool
	cmd := &cobra.Command{
		Use:   "boot-inputs",
		Short: "Build the microVM guest kernel and initramfs (cached by their inputs' digests)",
		Long: "Fetch the pinned Debian kernel package (apt-get download; its sha256 is checked), take its\n" +
			"vmlinuz and virtio modules, and write an initramfs with the modules in load order and the\n" +
			"guest init. A second run with the same inputs reuses the cache. --init names a static guest\n" +
			"init binary (CGO_ENABLED=0 go build ./internal/guestboot/guestinit); without it the go tool\n" +
			"builds one from the source tree it runs in. --agent names the static airlock-agent that the\n" +
			"initramfs carries and the init starts as the guest's PID 1 (default: the airlock-agent next\n" +
			"to the airlock binary, then in PATH, as the server finds it).",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				dd, err := client.ResolveDataDir(a.flags.dataDir, a.env.Getenv)
				if err != nil {
					return err
				}
				dir = filepath.Join(dd, "guestboot")
			}
			if agentBin == "" {
				p, err := defaultAgentBinary()
				if err != nil {
					return err
				}
				agentBin = p
			}
			art, err := guestboot.Build(cmd.Context(), guestboot.Options{Dir: dir, Init: initBin, Agent: agentBin, Uncompressed: uncompressed})
			if err != nil {
				return err
			}
			return a.printer().print(art, func(w io.Writer) {
				fmt.Fprintf(w, "KERNEL\t%s=%s (%s)\n", art.Kernel.Package, art.Kernel.Version, art.Kernel.Release)
				fmt.Fprintf(w, "KERNEL PATH\t%s\n", art.KernelPath)
				fmt.Fprintf(w, "KERNEL SHA256\t%s\n", art.KernelSHA256)
				fmt.Fprintf(w, "INITRD PATH\t%s\n", art.InitrdPath)
				fmt.Fprintf(w, "INITRD SHA256\t%s\n", art.InitrdSHA256)
				fmt.Fprintf(w, "AGENT SHA256\t%s\n", art.AgentSHA256)
				fmt.Fprintf(w, "MODULES\t%v\n", art.Modules)
				fmt.Fprintf(w, "REFERENCE\t%s\n", art.Reference())
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "cache directory (default: DATA_DIR/guestboot)")
	cmd.Flags().StringVar(&initBin, "init", "", "static guest init binary (default: build it with the go tool)")
	cmd.Flags().StringVar(&agentBin, "agent", "", "static airlock-agent binary for the initramfs (default: next to the airlock binary, then in PATH)")
	cmd.Flags().BoolVar(&uncompressed, "uncompressed", false, "write the initramfs without gzip (larger, boots faster under TCG)")
	return cmd
}

// defaultAgentBinary finds the airlock-agent the way the server does: next
// to the running airlock binary, then in PATH.
func defaultAgentBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "airlock-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("airlock-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("airlock-agent not found next to the airlock binary or in PATH: build it with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` or pass --agent")
}
