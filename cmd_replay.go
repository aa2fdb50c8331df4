package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"bitalign/kernels"
	"bitalign/session"
)

func newReplayCmd() *cobra.Command {
	var ckpt, capPath, save, device, profile string
	var rf reportFlags
	var tp int
	cmd := &cobra.Command{
		Use:   "replay --checkpoint DIR --capture FILE",
		Short: "Re-execute a captured step with the deterministic engine and compare the capture with it",
		Long: `Load the checkpoint, re-execute the step a capture recorded from its captured token ids with the
deterministic engine, and report how the capture compares with the replay (the diff report: capture = A,
replay = B). --save DIR keeps the replay as a capture; without it the replay is made in a temporary
directory and removed. A checkpoint of another model than the capture's is refused.

Exit status: 0 when the capture reproduces bit for bit, 1 when it diverges from the replay, 2 on bad input.`,
		Example: `  bitalign replay --checkpoint run/checkpoint --capture run/sampler --save run/replay
  bitalign replay --checkpoint run/checkpoint --capture run/sampler -o replay.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ckpt == "" || capPath == "" {
				return usageErr("replay: --checkpoint and --capture are required")
			}
			if err := rf.resolve("replay"); err != nil {
				return err
			}
			prof, err := kernels.ParseProfile(profile)
			if err != nil {
				return usageErr("replay: %v", err)
			}
			bar := newProgressBar(cmd)
			r, backend, err := session.ReplayStep(cmd.Context(), ckpt, capPath,
				session.StepOptions{TP: tp, Profile: prof, Device: device, Save: save, Progress: bar.update})
			bar.done()
			if err != nil {
				return inputErr(err)
			}
			if save != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: replayed %s on %s into %s\n", capPath, backend, save)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: replayed %s on %s\n", capPath, backend)
			}
			if err := rf.write(cmd, r); err != nil {
				return err
			}
			if !r.Identical {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&ckpt, "checkpoint", "", "model directory (config.json + safetensors)")
	cmd.Flags().StringVar(&capPath, "capture", "", "the capture to replay (file or per-rank directory)")
	cmd.Flags().StringVar(&save, "save", "", "keep the replay capture in this new directory (default: a temporary one, removed)")
	addDeviceFlag(cmd, &device, "engine")
	addProfileFlag(cmd, &profile, "kernel profile")
	cmd.Flags().IntVar(&tp, "tp", 1, "tensor-parallel ranks of the replay (1, 2, 4, 8)")
	rf.add(cmd)
	return cmd
}
