package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"bitalign/cuda"
	"bitalign/engine"
)

// gpuCollectives returns the GPU communicators for a TP group of tp ranks on the CUDA backend when the machine
// has a GPU per rank (nvls's peer-to-peer transport: the same bits as the CPU transport, without host round
// trips); nil keeps the CPU transport.
func gpuCollectives(backend engine.BackendFactory, tp int) engine.CollectivesFactory {
	if backend == nil || tp < 2 {
		return nil
	}
	if n, err := cuda.DeviceCount(); err != nil || n < tp {
		return nil
	}
	return engine.CUDACollectives()
}

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
