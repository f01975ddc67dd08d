package qemu

import (
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/vmdisk"
)

// A BareVM's command line is a sandbox VM's, less what the runtime adds
// around the devices, with the console in a file.
func TestBareVMArgsAreTheRuntimes(t *testing.T) {
	boot := Boot{Kernel: "/k", Initrd: "/i", CommandLine: "console=ttyS0"}
	for _, accel := range []Accel{AccelKVM, AccelTCG} {
		for _, incoming := range []bool{false, true} {
			v := BareVM{Dir: "/x", Name: "n", Accel: accel, MemoryMiB: 256, Memory: "memory", Shared: !incoming,
				DiskFormat: vmdisk.Raw, Boot: boot, Incoming: incoming}
			m := machine{Accel: accel, CPUs: 1, MemoryMiB: 256, Kernel: "/k", Initrd: "/i", Cmdline: boot.cmdline(accel),
				Disk: diskFile, DiskFormat: vmdisk.Raw, Memory: "memory", MemoryShared: !incoming}
			var want []string
			full := m.args("n", incoming)
			for i := 0; i < len(full); i++ {
				switch full[i] {
				case "-no-shutdown", "-S":
					continue
				case "-pidfile", "-sandbox":
					i++
					continue
				case "-chardev":
					if full[i+1] == "ringbuf,id=console,size=262144" {
						want = append(want, "-chardev", "file,id=console,path=console.log")
						i++
						continue
					}
				}
				want = append(want, full[i])
			}
			if got := v.args(); !slices.Equal(got, want) {
				t.Errorf("accel %s, incoming %v:\n got %q\nwant %q", accel, incoming, got, want)
			}
		}
	}
}
