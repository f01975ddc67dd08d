package bench

import (
	"context"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// hostFacts collects what the report says about the machine. binaries maps
// a runtime name to its binary, whose version is asked for.
func hostFacts(ctx context.Context, cg cgroups.Host, binaries map[string]string, airlockVersion string) HostFacts {
	h := HostFacts{
		CPUs:           goruntime.NumCPU(),
		Kernel:         kernelRelease(),
		OS:             osName("/etc/os-release"),
		Cgroups:        string(cg.Layout),
		GoVersion:      goruntime.Version(),
		AirlockVersion: airlockVersion,
		Versions:       map[string]string{},
	}
	for name, bin := range binaries {
		h.Versions[name] = binaryVersion(ctx, bin)
	}
	return h
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// osName returns PRETTY_NAME from an os-release file, "" if there is none.
func osName(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return parseOSRelease(string(data))
}

// parseOSRelease returns the PRETTY_NAME of os-release(5) content, unquoted,
// or "" if it has none.
func parseOSRelease(content string) string {
	for _, line := range strings.Split(content, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		} else {
			v = strings.Trim(v, `"'`)
		}
		return strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1 // no control characters in the one-line host facts
			}
			return r
		}, v)
	}
	return ""
}

// binaryVersion runs `bin --version` and returns the version it reports, or
// a note saying why there is none.
func binaryVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	v, err := oci.ParseVersion(string(out))
	if err != nil {
		return "(unknown)"
	}
	return v
}
