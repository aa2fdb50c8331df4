package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"bitalign/engine"
	"bitalign/ui"
)

// tuiArgs is what the root command and `open` pass to the debugger.
type tuiArgs struct {
	demo                   bool
	fault                  string
	layer                  int
	trainer, sampler, ckpt string
	device                 string
}

func runTUI(ctx context.Context, a tuiArgs) error {
	if a.fault != "" && a.fault != "none" {
		if _, err := engine.FaultByName(a.fault); err != nil {
			return usageErr("%v", err)
		}
	}
	for _, p := range []string{a.trainer, a.sampler, a.ckpt} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return usageErr("%v", err)
		}
	}
	return ui.Run(ctx, ui.Options{
		TrainerPath: a.trainer,
		SamplerPath: a.sampler,
		Checkpoint:  a.ckpt,
		Device:      a.device,
		Demo:        a.demo,
		Fault:       a.fault,
		FaultLayer:  a.layer,
	})
}

func addDemoFlags(cmd *cobra.Command, a *tuiArgs) {
	cmd.Flags().StringVar(&a.fault, "fault", "", "demo fault to plant (see bitalign demo --list-faults; \"none\" for identical captures)")
	cmd.Flags().IntVar(&a.layer, "layer", 1, "layer of a layered demo fault")
	cmd.Flags().StringVar(&a.device, "device", "auto", "replay device: auto, cpu or cuda")
}

func newOpenCmd() *cobra.Command {
	var a tuiArgs
	cmd := &cobra.Command{
		Use:   "open TRAINER SAMPLER",
		Short: "Open two captures in the interactive debugger",
		Long: `Open a trainer and a sampler capture (Arrow files, per-rank directories or safetensors files) in the
interactive debugger. With --checkpoint (a Hugging Face style model directory) ops can be replayed with the
deterministic engine to tell which side departs from the reference.`,
		Example: `  bitalign open run/trainer run/sampler --checkpoint run/checkpoint`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.trainer, a.sampler = args[0], args[1]
			return runTUI(cmd.Context(), a)
		},
	}
	cmd.Flags().StringVar(&a.ckpt, "checkpoint", "", "model directory (config.json + safetensors): enables replay")
	cmd.Flags().StringVar(&a.device, "device", "auto", "replay device: auto, cpu or cuda")
	return cmd
}
