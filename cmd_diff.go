package main

import (
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"bitalign/session"
)

func newDiffCmd() *cobra.Command {
	var rf reportFlags
	var gate diffGate
	var force bool
	var rl rlFlags
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two captures bit for bit (exit 0 identical, 1 divergent, 2 bad usage or input)",
		Long: `Compare two captures (Arrow files, per-rank directories, or safetensors files) bit for bit, or the
per-token log-probabilities of two logprob tables (Parquet, Arrow IPC or JSONL: one row per token, or one per
sequence with lists), or of a table and a capture. The format is told from the content; a pickle (.pt) is
refused. Both sides' logprobs are compared with the RL metrics of docs/rl-metrics.md, sequence by sequence
(--sequences N lists the worst N).

Tensors are aligned by (step, sequence, position, op, role) after reassembling tensor-parallel shards, so a
trainer's full-sequence prefill lines up with a sampler's one-token decode steps. The report gives the first
divergence (the earliest step, sequence and position, then op in execution order) and a per-op table.
Captures of different models are refused unless --force. --ops, --ignore-missing, --max-ulp and --max-rel
select what is compared and gate CI (docs/report-schema.md).

Exit status: 0 when the captures are bitwise identical (or within --max-ulp/--max-rel), 1 when they diverge,
2 on bad usage or bad input, or when nothing was compared.`,
		Example: `  bitalign diff run/trainer run/sampler
  bitalign diff run/trainer run/sampler -o report.html
  bitalign diff run/trainer run/sampler --ops 'layers.1*.mlp.*,logits' --ignore-missing --max-ulp 2
  bitalign diff trainer.parquet sampler.parquet --sequences 20
  bitalign diff old_log_probs.parquet rollout.jsonl --positions generated --logprobs-col rollout_log_probs`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rf.resolve("diff"); err != nil {
				return err
			}
			opts, err := gate.options(cmd)
			if err != nil {
				return err
			}
			rlo, err := rl.options(cmd)
			if err != nil {
				return err
			}
			bar := newProgressBar(cmd)
			l, err := session.Load(cmd.Context(), session.Inputs{A: args[0], B: args[1], Device: "cpu", Force: force,
				Options: opts, RL: rlo}, bar.update)
			bar.done()
			if err != nil {
				return inputErr(err)
			}
			defer l.Close()
			if err := rf.write(cmd, l.Report); err != nil {
				return err
			}
			return gate.exit(l.Report)
		},
	}
	rf.add(cmd)
	gate.flags(cmd)
	rl.add(cmd, true)
	cmd.Flags().BoolVar(&force, "force", false, "compare captures of different models (what can be compared)")
	return cmd
}

// diffGate is diff's selection and CI-gate flags: they become session options, and the report decides the
// exit status.
type diffGate struct {
	ops           []string
	ignoreMissing bool
	maxULP        uint64
	maxRel        float64
}

func (g *diffGate) flags(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&g.ops, "ops", nil, "compare only ops matching these glob patterns (repeatable or comma-separated, e.g. 'layers.1*.mlp.*')")
	cmd.Flags().BoolVar(&g.ignoreMissing, "ignore-missing", false, "tensors or positions one side lacks do not make the captures differ (they are counted)")
	cmd.Flags().Uint64Var(&g.maxULP, "max-ulp", 0, "exit 0 when every compared element is within N ULP (in each op's ULP dtype)")
	cmd.Flags().Float64Var(&g.maxRel, "max-rel", 0, "exit 0 when every compared element is within X × the RMS of its row (|a−b|/RMS)")
}

func (g *diffGate) options(cmd *cobra.Command) ([]session.Option, error) {
	var opts []session.Option
	if len(g.ops) > 0 {
		opts = append(opts, session.WithOps(g.ops...))
	}
	if g.ignoreMissing {
		opts = append(opts, session.WithIgnoreMissing())
	}
	t := session.Tolerance{MaxULP: g.maxULP, MaxRel: g.maxRel, HasULP: cmd.Flags().Changed("max-ulp"), HasRel: cmd.Flags().Changed("max-rel")}
	if t.HasRel && !(g.maxRel >= 0 && g.maxRel <= math.MaxFloat64) {
		return nil, usageErr("diff: --max-rel %v: want a finite number ≥ 0", g.maxRel)
	}
	if t.HasULP || t.HasRel {
		opts = append(opts, session.WithTolerance(t))
	}
	return opts, nil
}

// exit is diff's exit status for r: 2 when nothing was compared, 0 when identical or within the tolerance.
func (g *diffGate) exit(r *session.Report) error {
	switch {
	case r.Compared == 0:
		return inputErr(fmt.Errorf("diff: %s", r.Verdict()))
	case r.Passed():
		return nil
	}
	return &exitError{code: 1}
}
