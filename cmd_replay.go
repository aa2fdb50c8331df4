package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"bitalign/engine"
	"bitalign/kernels"
)

func newReplayCmd() *cobra.Command {
	var ckpt, capPath, out, device, format, profile string
	var tp int
	cmd := &cobra.Command{
		Use:   "replay --checkpoint DIR --capture FILE",
		Short: "Re-execute a captured step with the deterministic engine and compare the capture with it",
		Long: `Load the checkpoint, re-execute the step a capture recorded from its captured token ids with the
deterministic engine, write the replay as a capture (-o, a directory), and print how the capture compares with
the replay (the diff report: capture = A, replay = B).

Exit status: 0 when the capture reproduces bit for bit, 1 when it diverges from the replay, 2 on bad input.`,
		Example: `  bitalign replay --checkpoint run/checkpoint --capture run/sampler -o run/replay`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ckpt == "" || capPath == "" {
				return usageErr("replay: --checkpoint and --capture are required")
			}
			write, ok := reportFormats[format]
			if !ok {
				return usageErr("replay: unknown --format %q (text, json, md, html)", format)
			}
			prof, err := kernels.ParseProfile(profile)
			if err != nil {
				return usageErr("replay: %v", err)
			}
			backend, backendName, err := engine.SelectBackend(device)
			if err != nil {
				return usageErr("replay: %v", err)
			}
			if out == "" {
				tmp, err := os.MkdirTemp("", "bitalign-replay-*")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				out = tmp + "/replay"
			} else if _, err := os.Stat(out); err == nil {
				return usageErr("replay: %s exists; choose a new -o directory", out)
			}
			m, err := engine.Load(ckpt)
			if err != nil {
				return inputErr(err)
			}
			if _, err := m.Replay(cmd.Context(), capPath, out, engine.ReplayOptions{TP: tp, Profile: prof, Backend: backend,
				Collectives: gpuCollectives(backend, tp)}); err != nil {
				return inputErr(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: replayed %s on %s into %s\n", capPath, backendName, out)
			r, err := diffPaths(cmd, capPath, out)
			if err != nil {
				return err
			}
			if err := write(cmd.OutOrStdout(), r); err != nil {
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
	cmd.Flags().StringVarP(&out, "output", "o", "", "directory for the replay capture (default: a temporary one, removed afterwards)")
	cmd.Flags().StringVar(&device, "device", "cpu", "engine device: cpu, cuda or auto")
	cmd.Flags().StringVar(&profile, "profile", "canonical", "kernel profile: canonical or standard")
	cmd.Flags().IntVar(&tp, "tp", 1, "tensor-parallel ranks of the replay (1, 2, 4, 8)")
	cmd.Flags().StringVar(&format, "format", "text", "report format: text, json, md or html")
	return cmd
}
