package guestboot

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// HostTSCkHz is the host's TSC frequency in kHz, for the guest's
// tsc_early_khz= under TCG (QEMU's TCG rdtsc reads the host's TSC, so the
// guest must calibrate against the host's rate; without it the 6.1 kernel's
// calibration can hang a boot forever).
//
// Source: the "cpu MHz" line of /proc/cpuinfo. On hosts with constant_tsc
// and tsc_known_freq (the flags this reads too) the kernel reports the TSC
// rate there; /sys has no cpufreq here and dmesg's "tsc: Detected ... MHz"
// is not readable without privileges on every host, so it is not used.
// Without constant_tsc the value may follow frequency scaling: it is still
// the best estimate, and tsc=reliable no_timer_check keep the guest from
// second-guessing it.
func HostTSCkHz() (int, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 {
			return 0, fmt.Errorf("guestboot: /proc/cpuinfo: bad cpu MHz %q", v)
		}
		return int(mhz*1000 + 0.5), nil
	}
	return 0, fmt.Errorf("guestboot: /proc/cpuinfo has no cpu MHz line")
}

// KernelCmdline is the command line for a TCG microvm boot of these inputs.
// pci=off: microvm (without pcie=on) has no PCI bus; probing for one costs
// ~0.1-0.3 s under TCG and logs "PCI: Fatal: No config space access".
//
// tscKHz 0 leaves tsc_early_khz out: a caller that knows the host's TSC
// frequency only at launch (it is per host, while the command line is part
// of the environment's reference) adds TSCParam then, under TCG only.
func KernelCmdline(tscKHz int, extra ...string) string {
	args := []string{"console=ttyS0", "quiet", "loglevel=4"}
	if tscKHz > 0 {
		args = append(args, TSCParam(tscKHz))
	}
	args = append(args, "tsc=reliable", "no_timer_check", "panic=-1", "pci=off", "rdinit="+InitPath)
	return strings.Join(append(args, extra...), " ")
}

// TSCParam is the kernel parameter that tells a TCG guest the TSC's
// frequency (without it a boot can hang calibrating).
func TSCParam(tscKHz int) string { return fmt.Sprintf("tsc_early_khz=%d", tscKHz) }
