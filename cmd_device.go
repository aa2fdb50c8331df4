package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"bitalign/engine"
)

func newDevicesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "Show which compute backends this machine offers (CUDA GPUs, CPU)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, line := range engine.DescribeDevices() {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return nil
		},
	}
}
