package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session"
)

func newReplayCmd() *cobra.Command {
	var ckpt, capPath, save, device, profile, routingFrom string
	var routingWeights, timings, full bool
	var ops []string
	var rf reportFlags
	var tp int
	cmd := &cobra.Command{
		Use:   "replay --checkpoint DIR --capture FILE",
		Short: "Re-execute a captured step with the deterministic engine and compare the capture with it",
		Long: `Load the checkpoint, re-execute the step a capture recorded from its captured token ids with the
deterministic engine, and report how the capture compares with the replay (the diff report: capture = A,
replay = B). --save DIR keeps the replay as a capture; without it the replay is made in a temporary
directory and removed. A checkpoint of another model than the capture's is refused.

--routing-from CAPTURE (mixture-of-experts models) replays the step a second time with that capture's routing
(its layers.L.mlp.experts, and with --routing-weights its expert_weights: R3, routing replay) and reports both
verdicts: what changes between them is what routing caused, what remains is numerics. Formats text, md, json.

--ops PATTERN,... (globs, as diff --ops) replays, writes and compares only the ops they match: the forward
still computes what those ops need and stops after the last layer they name (an op after the layers, such as
logits, runs it whole). The report says which ops it compared; a pattern matching no op of the capture is an
error (exit 2).

A capture recorded as fingerprints (bitalign_capture's mode="fingerprint", bitalign fingerprint) is replayed
into fingerprints: the ops it holds as fingerprints only are written as fingerprints by the replay too (one
64-bit hash per token row, computed while the forward runs), so the replay capture is as small as the source
and the diff compares fingerprint with fingerprint; --full writes them in full instead.

--timings prints where the time went to stderr: reading the capture, loading the checkpoint, uploading the
weights, the forward, the device-to-host copies, encoding and writing the replay capture, the diff.

Exit status: 0 when the capture reproduces bit for bit, 1 when it diverges from the replay, 2 on bad input.
With --routing-from: 0 when it reproduces with its own routing.`,
		Example: `  bitalign replay --checkpoint run/checkpoint --capture run/sampler --save run/replay
  bitalign replay --checkpoint run/checkpoint --capture run/sampler -o replay.md
  bitalign replay --checkpoint run/checkpoint --capture run/sampler --ops 'layers.12.*'
  bitalign replay --checkpoint moe/checkpoint --capture moe/sampler --routing-from moe/trainer`,
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
			so := session.StepOptions{TP: tp, Profile: prof, Device: device, Save: save, Progress: bar.update,
				RoutingFrom: routingFrom, RoutingWeights: routingWeights, Ops: ops, Full: full}
			start := time.Now()
			if timings {
				so.Timings = engine.NewPhases()
				defer func() {
					fmt.Fprintln(cmd.ErrOrStderr(), "bitalign replay: timings")
					so.Timings.Write(cmd.ErrOrStderr(), time.Since(start)) //nolint:errcheck // stderr
				}()
			}
			if routingFrom != "" {
				if len(ops) > 0 {
					bar.done()
					return usageErr("replay: --ops and --routing-from: the routing replay compares every op; use one at a time")
				}
				if rf.format == "html" {
					bar.done()
					return usageErr("replay: --routing-from writes text, md or json, not html")
				}
				rr, backend, err := session.ReplayRouting(cmd.Context(), ckpt, capPath, so)
				bar.done()
				if err != nil {
					return inputErr(err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: replayed %s on %s with its own routing and with %s's\n", capPath, backend, routingFrom)
				if err := rf.writeWith(cmd, func(w io.Writer) error { return session.WriteRoutingReplay(w, rr, rf.format) }); err != nil {
					return err
				}
				if !rr.Own.Identical {
					return &exitError{code: 1}
				}
				return nil
			}
			if routingWeights {
				bar.done()
				return usageErr("replay: --routing-weights needs --routing-from")
			}
			r, backend, err := session.ReplayStep(cmd.Context(), ckpt, capPath, so)
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
	cmd.Flags().StringVar(&routingFrom, "routing-from", "", "also replay with this capture's MoE routing (R3) and report both verdicts")
	cmd.Flags().BoolVar(&routingWeights, "routing-weights", false, "with --routing-from: take its expert weights too")
	cmd.Flags().BoolVar(&full, "full", false, "write the replay in full even where the capture holds fingerprints only")
	cmd.Flags().BoolVar(&timings, "timings", false, "print the time of each phase (load, forward, copies, writes, diff) to stderr")
	cmd.Flags().StringSliceVar(&ops, "ops", nil, "replay, write and compare only ops matching these glob patterns (comma-separated, e.g. 'layers.12.*')")
	rf.add(cmd)
	return cmd
}
