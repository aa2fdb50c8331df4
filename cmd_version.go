package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module version.
var version = "0.1.0-dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print bitalign's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			rev := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" && len(s.Value) >= 12 {
						rev = " " + s.Value[:12]
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bitalign %s%s (%s, %s/%s)\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
