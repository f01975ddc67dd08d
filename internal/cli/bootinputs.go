package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/binpath"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/guestboot"
)

// bootInputsCommand builds the microVM environment's guest kernel and
// initramfs into the data dir's guestboot store (content-addressed: every
// file is named by the digests of its inputs), where the server's qemu
// environment finds them.
func (a *app) bootInputsCommand() *cobra.Command {
	var dir, agentBin string
	var uncompressed bool
	cmd := &cobra.Command{
		Use:   "boot-inputs",
		Short: "Build the microVM guest kernel and initramfs (cached by their inputs' digests)",
		Long: "Fetch the pinned Debian kernel package (apt-get download; its sha256 is checked), take its\n" +
			"vmlinuz and virtio modules, and write an initramfs with the modules in load order and the\n" +
			"static airlock-agent as its /init (it runs the guest init as PID 1, then itself as the agent\n" +
			"on the root disk). A second run with the same inputs reuses the cache. --agent names the\n" +
			"agent (default: the airlock-agent next to the airlock binary, then in PATH, as the server\n" +
			"finds it). The server builds the same inputs itself when it enables --env qemu.",
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
			art, err := guestboot.Build(cmd.Context(), guestboot.Options{Dir: dir, Agent: agentBin, Uncompressed: uncompressed})
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
	cmd.Flags().StringVar(&agentBin, "agent", "", "static airlock-agent binary for the initramfs (default: next to the airlock binary, then in PATH)")
	cmd.Flags().BoolVar(&uncompressed, "uncompressed", false, "write the initramfs without gzip (larger, boots faster under TCG)")
	return cmd
}

// defaultAgentBinary finds the airlock-agent the way the server does: next
// to the running airlock binary, then in PATH.
func defaultAgentBinary() (string, error) {
	p, err := binpath.Find("airlock-agent")
	if err != nil {
		return "", fmt.Errorf("%w: build it with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` or pass --agent", err)
	}
	return p, nil
}
