package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"bitalign/session"
)

func newFingerprintCmd() *cobra.Command {
	var out string
	var fullOps []string
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "fingerprint CAPTURE --out FILE",
		Short: "Write a capture as a fingerprint capture: one 64-bit hash per token row of every op",
		Long: `Write CAPTURE (an Arrow file, a per-rank directory or a safetensors file) as one Arrow file holding, for
every tensor, the fingerprints of its token rows (docs/capture-format.md, "Fingerprint tensors"; tensor-parallel
shards are reassembled first), and the ops matching --full-ops in full beside them. bitalign diff compares it
with a full capture or another fingerprint capture and finds the same first divergence, without values for
the ops it holds only as fingerprints. The Python recorder writes the same with
bitalign_capture.record(..., mode="fingerprint", full_ops=[...]).`,
		Example: `  bitalign fingerprint run/sampler --out run/sampler.fp.arrow
  bitalign fingerprint run/trainer --out run/trainer.fp.arrow --full-ops 'layers.2.*'
  bitalign diff run/trainer.fp.arrow run/sampler`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageErr("fingerprint: --out FILE is required")
			}
			n, err := session.Fingerprint(cmd.Context(), args[0], out, session.FingerprintOptions{FullOps: fullOps, Overwrite: overwrite})
			if err != nil {
				return inputErr(err)
			}
			fi, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d tensors, %d bytes\n", out, n, fi.Size())
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the fingerprint capture to write (refused if it exists, unless --overwrite)")
	cmd.Flags().StringSliceVar(&fullOps, "full-ops", nil, "glob patterns of ops also written in full (comma-separated or repeated)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace an existing file at --out")
	return cmd
}
