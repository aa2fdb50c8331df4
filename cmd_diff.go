package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/session"
)

// reportFormats maps a --format name to its writer.
var reportFormats = map[string]func(io.Writer, *session.Report) error{
	"text": session.WriteText,
	"json": session.WriteJSON,
	"md":   session.WriteMarkdown,
	"html": session.WriteHTML,
}

func newDiffCmd() *cobra.Command {
	var format, out string
	var force bool
	var gate diffGate
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two captures bit for bit (exit 0 identical, 1 divergent, 2 bad usage or input)",
		Long: `Compare two captures (Arrow files, per-rank directories, or safetensors files) bit for bit.

Tensors are aligned by (step, sequence, position, op, role) after reassembling tensor-parallel shards, so a
trainer's full-sequence prefill lines up with a sampler's one-token decode steps. The report gives the first
divergence (the earliest step, sequence and position, then op in execution order) and a per-op table.

Exit status: 0 when the captures are bitwise identical (or within --max-ulp / --max-rel), 1 when they
diverge, 2 on bad usage or bad input, including nothing compared.`,
		Example: `  bitalign diff run/trainer run/sampler
  bitalign diff run/trainer run/sampler --format html -o report.html
  bitalign diff run/trainer run/sampler --ops 'layers.1*.mlp.*,logits' --ignore-missing --max-ulp 2`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			write, ok := reportFormats[format]
			if !ok {
				return usageErr("diff: unknown --format %q (text, json, md, html)", format)
			}
			if out != "" {
				if err := checkWritable(out, force); err != nil {
					return err
				}
			}
			opts, err := gate.options(cmd)
			if err != nil {
				return err
			}
			r, err := diffPaths(cmd, args[0], args[1], opts...)
			if err != nil {
				return err
			}
			if out == "" {
				if err := write(cmd.OutOrStdout(), r); err != nil {
					return err
				}
			} else {
				if err := writeFileAtomic(out, force, func(w io.Writer) error { return write(w, r) }); err != nil {
					return inputErr(err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "bitalign: wrote %s report to %s\n", format, out)
			}
			return gate.exit(r)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "report format: text, json, md or html")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the report to FILE (atomically) instead of stdout")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the -o file if it exists")
	gate.flags(cmd)
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

// diffPaths opens and diffs two captures, showing progress on stderr when it is a terminal.
func diffPaths(cmd *cobra.Command, pathA, pathB string, opts ...session.Option) (*session.Report, error) {
	a, err := capture.Open(pathA)
	if err != nil {
		return nil, inputErr(err)
	}
	defer a.Close()
	b, err := capture.Open(pathB)
	if err != nil {
		return nil, inputErr(err)
	}
	defer b.Close()

	if producers := producersOf(a.Meta()); producers != nil {
		opts = append(opts, session.WithProducers(producers))
	}
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p := newProgress(f, "diff")
		defer p.done()
		opts = append(opts, session.WithProgress(p.update))
	}
	r, err := session.Diff(cmd.Context(), a, b, opts...)
	if err != nil {
		return nil, inputErr(err)
	}
	return r, nil
}

// producersOf returns the op graph of the capture's model, when its metadata names one the engine knows, so the
// diff can tell a local divergence from a propagated one.
func producersOf(m capture.Meta) func(op string) []string {
	cfg, err := configOf(m)
	if err != nil {
		return nil
	}
	return func(op string) []string { return engine.Producers(cfg, op) }
}

// configOf reads the engine config a capture's metadata carries: Meta.Model is
// {"architecture": ..., "config": {Hugging Face config.json}}.
func configOf(m capture.Meta) (engine.Config, error) {
	var model struct {
		Config json.RawMessage `json:"config"`
	}
	if len(m.Model) == 0 {
		return engine.Config{}, fmt.Errorf("the capture names no model")
	}
	if err := json.Unmarshal(m.Model, &model); err != nil || len(model.Config) == 0 {
		return engine.Config{}, fmt.Errorf("the capture's model metadata has no config")
	}
	return engine.ParseConfig("capture metadata", model.Config)
}

// progress draws a one-line progress bar on a terminal.
type progress struct {
	f     *os.File
	label string
	last  int
}

func newProgress(f *os.File, label string) *progress { return &progress{f: f, label: label, last: -1} }

func (p *progress) update(done, total int64) {
	if total <= 0 {
		return
	}
	pct := int(done * 100 / total)
	if pct == p.last {
		return
	}
	p.last = pct
	const width = 30
	n := pct * width / 100
	fmt.Fprintf(p.f, "\r%s [%s%s] %3d%%", p.label, strings.Repeat("█", n), strings.Repeat("·", width-n), pct)
}

func (p *progress) done() {
	if p.last >= 0 {
		fmt.Fprint(p.f, "\r\033[K")
	}
}
