package main

import (
	"io"
	"sync"

	"github.com/spf13/cobra"

	"bitalign/session"
	"bitalign/session/view"
)

func newAuditCmd() *cobra.Command {
	var rf reportFlags
	var ckpt string
	var force bool
	var margin float64
	cmd := &cobra.Command{
		Use:   "audit TRAINER SAMPLER --checkpoint DIR",
		Short: "Find the bug under the noise: every op's local error on both sides against a float64 oracle, and the suspects",
		Long: `Re-execute every op of both captures from that side's own captured inputs in float64 (exactly where
float64 is not enough), rounded once to the op's output dtype: the correctly rounded result of the side's
inputs. A side's local error is its output's distance from it. Rounding noise from a kernel's summation order
stays at a few ULPs; a bug (a wrong epsilon, a perturbed weight, a matmul in the wrong precision, the wrong
RoPE frequencies) is far off, on its side only. The report lists every op's local error on both sides, each
op family's noise floor and the suspects, ranked (docs/audit.md).

Exit status: 0 when there are no suspects, 1 when there are, 2 on bad usage or bad input.`,
		Example: `  bitalign audit run/trainer run/sampler --checkpoint run/checkpoint
  bitalign audit run/trainer run/sampler --checkpoint run/checkpoint -o audit.html`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ckpt == "" {
				return usageErr("audit: --checkpoint DIR is required (the oracle re-executes the model's ops)")
			}
			if margin < 0 {
				return usageErr("audit: --margin %g: must be positive", margin)
			}
			if err := rf.resolve("audit"); err != nil {
				return err
			}
			bar := newProgressBar(cmd)
			l, err := session.Load(cmd.Context(), session.Inputs{A: args[0], B: args[1], Checkpoint: ckpt, Device: "cpu",
				Force: force}, bar.update)
			if err != nil {
				bar.done()
				return inputErr(err)
			}
			defer l.Close()
			var mu sync.Mutex
			r, err := session.Audit(cmd.Context(), l.Session, l.Model, session.AuditOptions{Margin: margin,
				Progress: func(done, total int) {
					mu.Lock()
					bar.update(view.Progress{Stage: "auditing", Done: int64(done), Total: int64(total)})
					mu.Unlock()
				}})
			bar.done()
			if err != nil {
				return inputErr(err)
			}
			if err := rf.writeWith(cmd, func(w io.Writer) error { return session.WriteAudit(w, r, rf.format) }); err != nil {
				return err
			}
			if r.Exit() != 0 {
				return &exitError{code: r.Exit()}
			}
			return nil
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&ckpt, "checkpoint", "", "model directory (config.json + safetensors) both sides ran")
	cmd.Flags().Float64Var(&margin, "margin", session.DefaultAuditMargin, "a suspect's local error exceeds this many times its noise floor")
	cmd.Flags().BoolVar(&force, "force", false, "audit captures of different models (what can be compared)")
	return cmd
}
