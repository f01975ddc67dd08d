package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/guestboot"
)

// bootInputsCommand builds the microVM environment's guest kernel and
// initramfs (spike: into a cache directory; the content store comes with
// the QEMU runtime).
func (a *app) bootInputsCommand() *cobra.Command {
	var dir, initBin string
	var uncompressed bool
	cmd := &cobra.Command{
		Use:   "boot-inputs",
		Short: "Build the microVM guest kernel and initramfs (cached by their inputs' digests)",
		Long: "Fetch the pinned Debian kernel package (apt-get download; its sha256 is checked), take its\n" +
			"vmlinuz and virtio modules, and write an initramfs with the modules in load order and the\n" +
			"guest init. A second run with the same inputs reuses the cache. --init names a static guest\n" +
			"init binary (CGO_ENABLED=0 go build ./internal/guestboot/guestinit); without it the go tool\n" +
			"builds one from the source tree it runs in.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				dd, err := client.ResolveDataDir(a.flags.dataDir, a.env.Getenv)
				if err != nil {
					return err
				}
				dir = filepath.Join(dd, "guestboot")
			}
			art, err := guestboot.Build(cmd.Context(), guestboot.Options{Dir: dir, Init: initBin, Uncompressed: uncompressed})
			if err != nil {
				return err
			}
			return a.printer().print(art, func(w io.Writer) {
				fmt.Fprintf(w, "KERNEL\t%s=%s (%s)\n", art.Kernel.Package, art.Kernel.Version, art.Kernel.Release)
				fmt.Fprintf(w, "KERNEL PATH\t%s\n", art.KernelPath)
				fmt.Fprintf(w, "KERNEL SHA256\t%s\n", art.KernelSHA256)
				fmt.Fprintf(w, "INITRD PATH\t%s\n", art.InitrdPath)
				fmt.Fprintf(w, "INITRD SHA256\t%s\n", art.InitrdSHA256)
				fmt.Fprintf(w, "MODULES\t%v\n", art.Modules)
				fmt.Fprintf(w, "REFERENCE\t%s\n", art.Reference())
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "cache directory (default: DATA_DIR/guestboot)")
	cmd.Flags().StringVar(&initBin, "init", "", "static guest init binary (default: build it with the go tool)")
	cmd.Flags().BoolVar(&uncompressed, "uncompressed", false, "write the initramfs without gzip (larger, boots faster under TCG)")
	return cmd
}
