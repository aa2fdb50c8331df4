package main

import (
	"github.com/spf13/cobra"

	"bitalign/session"
)

func newDiffCmd() *cobra.Command {
	var rf reportFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two captures bit for bit (exit 0 identical, 1 divergent, 2 bad usage or input)",
		Long: `Compare two captures (Arrow files, per-rank directories, or safetensors files) bit for bit.

Tensors are aligned by (step, sequence, position, op, role) after reassembling tensor-parallel shards, so a
trainer's full-sequence prefill lines up with a sampler's one-token decode steps. The report gives the first
divergence (earliest op in execution order) and a per-op table. Captures of different models are refused
unless --force.

Exit status: 0 when the captures are bitwise identical, 1 when they diverge, 2 on bad usage or bad input.`,
		Example: `  bitalign diff run/trainer run/sampler
  bitalign diff run/trainer run/sampler -o report.html`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rf.resolve("diff"); err != nil {
				return err
			}
			bar := newProgressBar(cmd)
			l, err := session.Load(cmd.Context(), session.Inputs{A: args[0], B: args[1], Device: "cpu", Force: force}, bar.update)
			bar.done()
			if err != nil {
				return inputErr(err)
			}
			defer l.Close()
			if err := rf.write(cmd, l.Report); err != nil {
				return err
			}
			if !l.Report.Identical {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	rf.add(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "compare captures of different models (what can be compared)")
	return cmd
}
