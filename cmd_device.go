package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"bitalign/cuda"
)

func newDevicesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "Show which compute backends this machine offers (CUDA GPUs, CPU)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			n, err := cuda.DeviceCount()
			if err != nil {
				fmt.Fprintf(out, "cuda: unavailable (%v)\n", err)
			} else {
				v, _ := cuda.DriverVersion()
				fmt.Fprintf(out, "cuda: driver %d.%d, %d device(s)\n", v/1000, (v%1000)/10, n)
				for i := 0; i < n; i++ {
					d, err := cuda.Open(i)
					if err != nil {
						fmt.Fprintf(out, "  %d: %v\n", i, err)
						continue
					}
					fmt.Fprintf(out, "  %d: %s\n", i, d)
					d.Close()
				}
			}
			fmt.Fprintln(out, "cpu: always available (the reference engine)")
			return nil
		},
	}
}
