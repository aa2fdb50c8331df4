package main

import (
	"github.com/spf13/cobra"

	"bitalign/logprobs"
	"bitalign/session"
)

// rlFlags are diff's and open's flags for logprob tables (docs/rl-metrics.md): column names, what positions
// count, the importance-ratio bounds and how many sequences the report lists.
type rlFlags struct {
	cols      logprobs.Columns
	positions string
	isLow     float64
	isHigh    float64
	topK      int
	sequences int
}

func (f *rlFlags) add(cmd *cobra.Command, report bool) {
	d := logprobs.DefaultColumns
	fl := cmd.Flags()
	fl.StringVar(&f.cols.Seq, "seq-col", d.Seq, "logprob tables: the sequence id column")
	fl.StringVar(&f.cols.Pos, "pos-col", d.Pos, "logprob tables, one row per token: the position column")
	fl.StringVar(&f.cols.Token, "token-col", d.Token, "logprob tables, one row per token: the token id column")
	fl.StringVar(&f.cols.Logprob, "logprob-col", d.Logprob, "logprob tables, one row per token: the log-probability column")
	fl.StringVar(&f.cols.Tokens, "tokens-col", d.Tokens, "logprob tables, one row per sequence: the token ids list column")
	fl.StringVar(&f.cols.Logprobs, "logprobs-col", d.Logprobs, "logprob tables, one row per sequence: the log-probabilities list column")
	fl.StringVar(&f.cols.Start, "start-col", d.Start, "logprob tables, one row per sequence: the first listed token's position (absent: 0)")
	fl.StringVar(&f.positions, "positions", "absolute", "what a logprob table's positions count: absolute (token index in the whole sequence) or generated (0 = the first token after the prompt)")
	completeWords(cmd, "positions", "absolute", "generated")
	fl.Float64Var(&f.isLow, "is-low", logprobs.DefaultThresholds.ISLow, "importance ratios exp(Δ) below this are counted as outside (TIS/MIS lower bound)")
	fl.Float64Var(&f.isHigh, "is-high", logprobs.DefaultThresholds.ISHigh, "importance ratios exp(Δ) above this are counted as outside (TIS/MIS upper bound)")
	fl.IntVar(&f.topK, "topk", logprobs.DefaultThresholds.TopK, "k of the top-k overlap when both sides captured logits")
	if report {
		fl.IntVar(&f.sequences, "sequences", session.DefaultSequences, "list the worst N sequences (and, for a logprob-only pair, the bitalign_capture line that records them in full)")
	}
}

func (f *rlFlags) options(cmd *cobra.Command) (session.RLOptions, error) {
	command := cmd.Name()
	pos, err := logprobs.ParseNumbering(f.positions)
	if err != nil {
		return session.RLOptions{}, usageErr("%s: --positions %q: want absolute or generated", command, f.positions)
	}
	if !(f.isLow >= 0 && f.isLow < f.isHigh) {
		return session.RLOptions{}, usageErr("%s: --is-low %v, --is-high %v: want 0 ≤ low < high", command, f.isLow, f.isHigh)
	}
	if f.topK <= 0 {
		return session.RLOptions{}, usageErr("%s: --topk %d: want ≥ 1", command, f.topK)
	}
	if f.sequences < 0 {
		return session.RLOptions{}, usageErr("%s: --sequences %d: want ≥ 0", command, f.sequences)
	}
	th := logprobs.DefaultThresholds
	th.ISLow, th.ISHigh, th.TopK = f.isLow, f.isHigh, f.topK
	return session.RLOptions{Columns: f.cols, Positions: pos, PositionsSet: cmd.Flags().Changed("positions"), Thresholds: th,
		Sequences: f.sequences}, nil
}
