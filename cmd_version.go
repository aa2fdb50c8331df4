package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time (the Makefile passes -ldflags "-X main.version=$(git describe --always --dirty)");
// otherwise it is the module's version and versionString adds the commit the Go toolchain recorded.
var version = "0.1.0-dev"

// versionString is "bitalign VERSION [COMMIT[-dirty]] (go, os/arch)".
func versionString() string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		var commit, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(commit) >= 12 {
			rev = " " + commit[:12] + dirty
		}
	}
	return fmt.Sprintf("bitalign %s%s (%s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print bitalign's version and, when known, the commit it was built from",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
		},
	}
}
