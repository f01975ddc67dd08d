package agent

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
)

// linuxGuest changes the machine the agent runs in; it needs root
// (CAP_SYS_ADMIN, CAP_SYS_TIME, CAP_NET_ADMIN), i.e. a VM agent as PID 1.
type linuxGuest struct{}

// resolvConf is where ConfigureNetwork writes the name servers.
const resolvConf = "/etc/resolv.conf"

func (linuxGuest) SetHostname(name string) error {
	return unix.Sethostname([]byte(name))
}

// rndAddEntropy is RNDADDENTROPY, _IOW('R', 0x03, int[2]).
const rndAddEntropy = 0x40085203

// rndReseedCRNG is RNDRESEEDCRNG, _IO('R', 0x07).
const rndReseedCRNG = 0x5207

// AddEntropy mixes b into the kernel's pool and credits len(b)*8 bits
// (struct rand_pool_info: entropy_count, buf_size, then the bytes), then
// reseeds the kernel's CRNG from the pool at once (RNDRESEEDCRNG): a
// ready CRNG otherwise takes new input only at its next periodic reseed,
// so two clones of one snapshot would hand out the same random bytes
// until then.
func (linuxGuest) AddEntropy(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 8+len(b))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(b) * 8)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(b))
	copy(buf[8:], b)
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, rndAddEntropy, uintptr(unsafe.Pointer(&buf[0])))
	}); cerr != nil {
		return cerr
	}
	if errno != 0 {
		return fmt.Errorf("ioctl RNDADDENTROPY: %w", errno)
	}
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, rndReseedCRNG, 0)
	}); cerr != nil {
		return cerr
	}
	// ENODATA: the CRNG is not ready yet (early boot); it seeds itself
	// from the credited pool when it becomes ready.
	if errno != 0 && errno != unix.ENODATA {
		return fmt.Errorf("ioctl RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

func (linuxGuest) SetTime(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// ConfigureNetwork brings lo and the interface up, replaces the
// interface's address and the default route (so a second call with the
// same config changes nothing) and writes /etc/resolv.conf.
func (linuxGuest) ConfigureNetwork(n guestNetwork) error {
	if lo, err := netlink.LinkByName("lo"); err == nil {
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("bring lo up: %w", err)
		}
	}
	link, err := netlink.LinkByName(n.iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", n.iface, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.addr.Addr().AsSlice(), Mask: net.CIDRMask(n.addr.Bits(), n.addr.Addr().BitLen())}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", n.addr, n.iface, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", n.iface, err)
	}
	if n.gateway.IsValid() {
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: n.gateway.AsSlice()}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %s: %w", n.gateway, err)
		}
	}
	if len(n.dns) > 0 {
		var b strings.Builder
		b.WriteString("# written by airlock-agent (PUT /v1/guest)\n")
		for _, d := range n.dns {
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		if err := os.MkdirAll("/etc", 0o755); err != nil {
			return err
		}
		// atomicfile renames over the path: a symlink there (e.g. to
		// systemd-resolved's file) is replaced, not followed.
		if err := atomicfile.Write(resolvConf, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", resolvConf, err)
		}
	}
	return nil
}
