package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionInfo describes the running binary.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// buildVersion reads the version from the binary's build information.
func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print airlock's version",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			return a.printer().print(v, func(w io.Writer) {
				fmt.Fprintf(w, "Version:\t%s\n", v.Version)
				if v.Commit != "" {
					mod := ""
					if v.Modified {
						mod = " (modified)"
					}
					fmt.Fprintf(w, "Commit:\t%s%s\n", v.Commit, mod)
				}
				fmt.Fprintf(w, "Go:\t%s\n", v.GoVersion)
				fmt.Fprintf(w, "Platform:\t%s\n", v.Platform)
			})
		},
	}
}
