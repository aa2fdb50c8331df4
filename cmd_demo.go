package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session"
)

func newDemoCmd() *cobra.Command {
	var out, fault, profile, device, model string
	var layer int
	var list, force bool
	cmd := &cobra.Command{
		Use:   "demo --out DIR",
		Short: "Write a small random model and a trainer and a sampler capture of the same prompts",
		Long: `Write DIR/checkpoint (a small random Llama-style bf16 model), DIR/sampler (a continuous-batching rollout at
TP 1) and DIR/trainer (the trainer's recomputation of the sampled sequences: one prefill at batch 8, TP 2).
--model moe writes a Qwen3-MoE-style model instead (16 experts, 4 per token); the faults that need experts
(router-split-k) choose it themselves.

With the canonical kernels the two captures are bitwise identical in every op and log-probability, and so they
are with --profile tc (the tensor-core profile; its demo model has 4 heads of 64 in place of 8 of 32, the head
dims the GPU's tc attention serves). --fault
plants one documented source of mismatch (see --list-faults) on the side and at the op where it really arises;
--fault none (the default) plants none.`,
		Example: `  bitalign demo --out /tmp/run && bitalign diff /tmp/run/trainer /tmp/run/sampler
  bitalign demo --out /tmp/fusion --fault fusion --layer 2
  bitalign demo --out /tmp/moe --model moe --fault router-split-k`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "FAULT\tSIDE\tFIRST DIVERGENCE\tDESCRIPTION")
				for _, f := range engine.Faults() {
					where := f.Where
					if f.FirstFlip != "" {
						where += " (first routing flip: " + f.FirstFlip + ")"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", f.Name, f.Side, where, f.Description)
				}
				return w.Flush()
			}
			if out == "" {
				return usageErr("demo: --out DIR is required")
			}
			if err := engine.CheckDemoFault(fault, layer); err != nil {
				return usageErr("demo: %v", err)
			}
			if _, err := engine.DemoModelConfig(model, fault); err != nil {
				return usageErr("demo: %v", err)
			}
			prof, err := kernels.ParseProfile(profile)
			if err != nil {
				return usageErr("demo: %v", err)
			}
			backend, name, err := engine.SelectBackend(device)
			if err != nil {
				return usageErr("demo: %v", err)
			}
			start := time.Now()
			err = engine.Demo(out, engine.DemoOptions{Model: model, Fault: fault, Layer: layer, Profile: prof, Overwrite: force, Backend: backend,
				Collectives: engine.GPUCollectives(backend, engine.DemoTrainerTP(fault))})
			if err != nil {
				return inputErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/checkpoint, %s/trainer, %s/sampler in %.1fs (%s)\n",
				out, out, out, time.Since(start).Seconds(), name)
			fmt.Fprintf(cmd.OutOrStdout(), "next: bitalign diff %s/trainer %s/sampler\n      bitalign open %s/trainer %s/sampler --checkpoint %s/checkpoint\n",
				out, out, out, out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write (must be empty or absent unless --force)")
	addFaultFlag(cmd, &fault, `plant one mismatch source (see --list-faults; "none" or empty: none)`)
	cmd.Flags().IntVar(&layer, "layer", session.DefaultDemoLayer, "layer of a layered fault")
	cmd.Flags().BoolVar(&list, "list-faults", false, "list the fault catalog and exit")
	cmd.Flags().StringVar(&model, "model", "", "demo model: "+strings.Join(engine.DemoModels(), " or ")+" (default dense; an MoE fault picks moe)")
	completeWords(cmd, "model", engine.DemoModels()...)
	addProfileFlag(cmd, &profile, "kernel profile of both sides")
	addDeviceFlag(cmd, &device, "engine")
	cmd.Flags().BoolVar(&force, "force", false, "replace DIR's checkpoint/, trainer/ and sampler/ if DIR is not empty")
	return cmd
}
