// Package overview draws the top of the overview screen: both captures' metadata side by side, the one-line
// verdict and a sparkline of divergence magnitude along the forward pass.
package overview

import (
	"fmt"
	"math"
	"strings"

	"charm.land/lipgloss/v2"

	"bitalign/internal/fp"
	"bitalign/session/view"
	"bitalign/ui/oplist"
	"bitalign/ui/theme"
)

type field struct {
	name string
	get  func(c *view.CaptureInfo) string
}

var fields = []field{
	{"path", func(c *view.CaptureInfo) string { return c.Path }},
	{"side", func(c *view.CaptureInfo) string { return c.Side }},
	{"model", func(c *view.CaptureInfo) string { return join(c.Model, c.DType) }},
	{"layout", func(c *view.CaptureInfo) string {
		return fmt.Sprintf("batch %d · TP%d PP%d DP%d", c.BatchSize, c.TP, c.PP, c.DP)
	}},
	{"kernels", func(c *view.CaptureInfo) string { return c.KernelProfile }},
	{"step", func(c *view.CaptureInfo) string { return fmt.Sprintf("%d · seed %d", c.Step, c.Seed) }},
	{"tensors", func(c *view.CaptureInfo) string { return fmt.Sprintf("%d (%s)", c.Tensors, Bytes(c.Bytes)) }},
	{"producer", func(c *view.CaptureInfo) string { return c.Producer }},
}

// compact is the field set used when height is short.
var compact = []string{"model", "layout", "kernels"}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + " · " + b
}

// Bytes formats a byte count.
func Bytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// MetaRows is how many rows Meta draws for at most max rows.
func MetaRows(maxRows int) int {
	if maxRows >= len(fields)+1 {
		return len(fields) + 1
	}
	return len(compact) + 1
}

// Meta draws the two captures' metadata as a table (field | A | B), w cells wide and rows tall (MetaRows).
// Fields where the two sides differ are drawn in the warning colour: they are the usual suspects.
func Meta(st theme.Styles, r *view.Report, w, rows int) string {
	use := fields
	if rows < len(fields)+1 {
		use = nil
		for _, f := range fields {
			for _, c := range compact {
				if f.name == c {
					use = append(use, f)
				}
			}
		}
	}
	labelW := 9
	colW := max((w-labelW)/2, 1)
	var b strings.Builder
	b.WriteString(st.Faint.Render(theme.Fit("", labelW)) + st.Title.Render(theme.Fit("A · "+r.A.Side, colW)) +
		st.Title.Render(theme.Fit("B · "+r.B.Side, colW)))
	for _, f := range use {
		a, bb := f.get(&r.A), f.get(&r.B)
		vs := st.Text
		if a != bb && f.name != "path" && f.name != "side" {
			vs = st.Warn
		}
		b.WriteString("\n" + st.Muted.Render(theme.Fit(f.name, labelW)) + vs.Render(theme.Fit(a, colW-1)) + " " +
			vs.Render(theme.Fit(bb, colW)))
	}
	return b.String()
}

// Verdict is the one-line verdict, with the logprob headline after it when both sides hold logprobs.
func Verdict(st theme.Styles, r *view.Report) string {
	v := verdict(st, r)
	if r.RL != nil {
		v += st.Muted.Render(" · " + r.RL.Headline)
	}
	return v
}

func verdict(st theme.Styles, r *view.Report) string {
	if r.Identical {
		return st.Good.Bold(true).Render("✓ bitwise identical") + st.Muted.Render(fmt.Sprintf(" · %d ops compared", len(r.Ops)))
	}
	if r.First == nil {
		problems := 0
		for _, o := range r.Ops {
			if o.Status.Problem() {
				problems++
			}
		}
		return st.Warn.Bold(true).Render(fmt.Sprintf("∅ no value differs, but %d ops were not fully compared (missing or shapes differ)", problems))
	}
	f := r.First
	by := "max " + oplist.FormatULP(f.MaxULP)
	for i := range r.Ops {
		if o := &r.Ops[i]; o.Op == f.Op && o.Role == f.Role && oplist.Integer(o.DType) {
			by = oplist.Differ(o.Mismatched) // ids and tokens differ, they are not off by ULPs
		}
	}
	return st.Bad.Bold(true).Render("✗ first divergence: ") + st.Title.Render(f.Op) +
		st.Text.Render(fmt.Sprintf(", seq %d, pos %d, %s", f.At.Seq, f.At.Pos, by))
}

var spark = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws divergence along the forward pass in w cells (bar height: fraction of elements differing;
// colour: max ULP, or theme.IntLevel for an integer op; ops are binned by max when there are more ops than
// cells), with a marker row: ▲ under the selected op, layer starts labelled.
// It returns the two lines and, for mouse hit-testing, the op index each cell stands for.
func Sparkline(st theme.Styles, ops []view.OpStat, selected, w int) (string, []int) {
	n := len(ops)
	if n == 0 || w <= 0 {
		return "", nil
	}
	cells, per := min(n, w), 1
	if n < w {
		per = w / n // stretch: each op gets per cells
		cells = n * per
	}
	var line, marks strings.Builder
	// consecutive cells of one style are rendered as one run
	runStyle, run := -1, []rune(nil)
	styleOf := func(i int) lipgloss.Style {
		switch i {
		case -2:
			return st.Warn
		case 0:
			return st.Faint
		}
		return st.Heat[i]
	}
	emit := func(style int, r rune) {
		if style != runStyle && len(run) > 0 {
			line.WriteString(styleOf(runStyle).Render(string(run)))
			run = run[:0]
		}
		runStyle = style
		run = append(run, r)
	}
	cellOp := make([]int, cells)
	markRunes := []rune(strings.Repeat(" ", cells))
	lastLayer := -2
	for c := 0; c < cells; c++ {
		lo, hi := c*n/cells, (c+1)*n/cells
		if per > 1 {
			lo, hi = c/per, c/per+1
		}
		best, status := lo, view.Identical
		for i := lo; i < hi; i++ {
			if ops[i].MaxULP > ops[best].MaxULP {
				best = i
			}
			if ops[i].Status == view.Divergent || (ops[i].Status.Problem() && status == view.Identical) {
				status = ops[i].Status
			}
		}
		cellOp[c] = best
		o := ops[best]
		switch {
		case o.Pending && status == view.Divergent && o.MaxULP == 0: // divergent, its statistics still to come
			emit(-2, '?')
		case status.Problem() && o.MaxULP == 0:
			emit(-2, '∅')
		case o.MaxULP == 0:
			emit(0, '·')
		default:
			// height: the fraction of elements that differ; colour: the largest ULP, as in the heatmap legend
			h := int(math.Ceil(o.MismatchFrac() * float64(len(spark))))
			emit(theme.ValueLevel(fp.Bucket(o.MaxULP), oplist.Integer(o.DType)), spark[max(1, min(h, len(spark)))-1])
		}
		if selected >= lo && selected < hi && c%per == 0 {
			markRunes[c] = '▲'
		} else if l := ops[lo].Layer; l >= 0 && l != lastLayer {
			label := []rune(fmt.Sprintf("L%d", l))
			if c+len(label) <= cells && allSpace(markRunes[c:c+len(label)]) {
				copy(markRunes[c:], label)
			}
		}
		lastLayer = ops[lo].Layer
	}
	if len(run) > 0 {
		line.WriteString(styleOf(runStyle).Render(string(run)))
	}
	for _, r := range markRunes {
		if r == '▲' {
			marks.WriteString(st.Accent.Render("▲"))
		} else {
			marks.WriteString(st.Faint.Render(string(r)))
		}
	}
	return line.String() + "\n" + marks.String(), cellOp
}

func allSpace(r []rune) bool {
	for _, c := range r {
		if c != ' ' {
			return false
		}
	}
	return true
}
