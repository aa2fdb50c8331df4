package session

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"text/tabwriter"
)

// WriteAudit writes an audit report in format, one of view.ReportFormats (docs/audit.md).
func WriteAudit(w io.Writer, r *AuditReport, format string) error {
	return writeAs(w, format, r, writeAuditText, writeAuditJSON, writeAuditMarkdown, writeAuditHTML)
}

// Headline is the audit's one-line verdict, the same in every format and in the TUI.
func (r *AuditReport) Headline() string {
	if len(r.Suspects) == 0 {
		return fmt.Sprintf("no suspects: every op of both sides is within %g× its noise floor of the correctly rounded result of its own inputs", r.Margin)
	}
	s := r.Suspects[0]
	return fmt.Sprintf("%s; first: %s on %s (%s ULP, %s× its noise floor of %s) at seq %d pos %d",
		plural(len(r.Suspects), "suspect"), s.Op, s.SideName, fmtULP(s.LocalULP), fmtRatio(s.Ratio),
		fmtULP(s.NoiseFloorULP), s.Seq, s.Pos)
}

func (r *AuditReport) sideNames() [2]string { return [2]string{sideName(r.A, "A"), sideName(r.B, "B")} }

func writeAuditText(w io.Writer, r *AuditReport) error {
	names := r.sideNames()
	fmt.Fprintf(w, "bitalign audit: %s\n\n", r.Headline())
	fmt.Fprintf(w, "A: %s %s\nB: %s %s\n", names[0], r.A.Path, names[1], r.B.Path)
	fmt.Fprintf(w, "model %s; %d (op, step, seq) measured on both sides in %.2fs; margin %g\n\n", r.Model, r.Measured,
		r.Elapsed.Seconds(), r.Margin)
	if len(r.Suspects) > 0 {
		fmt.Fprintln(w, "Suspects (most severe first; local error in ULPs, docs/audit.md):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\top\tside\tseq\tpos\telement\tlocal\tfloor\t×floor\tmax ULP\tat scale\trule")
		for i, s := range r.Suspects {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", i+1, s.Op, s.SideName, s.Seq, s.Pos,
				fmtElement(s.Element), fmtULP(s.LocalULP), fmtULP(s.NoiseFloorULP), fmtRatio(s.Ratio), s.LocalMaxULP,
				fmtULP(s.LocalScaleULP), s.Rule)
		}
		tw.Flush()
		fmt.Fprintln(w)
		for i, s := range r.Suspects {
			fmt.Fprintf(w, "%d. %s\n", i+1, s.Evidence)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Local error per op (ULPs; max element ULP and ULPs at the row's scale in brackets; floor = noise floor):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "#\top\tdtype\t%s\tfloor\t%s\tfloor\tengine\n", names[0], names[1])
	for _, o := range r.Ops {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Index, o.Op, o.dtype(), o.Sides[0].cell(), fmtULP(o.Sides[0].FloorULP),
			o.Sides[1].cell(), fmtULP(o.Sides[1].FloorULP), fmtULP(max(o.Sides[0].EngineLocalULP, o.Sides[1].EngineLocalULP)))
	}
	return tw.Flush()
}

func (o *AuditOp) dtype() string {
	for _, s := range o.Sides {
		if s.DType != "" {
			return s.DType
		}
	}
	return ""
}

// cell is one side's figure in a table: "12 [30847]", or why it was not measured.
func (a *AuditSide) cell() string {
	if !a.measured() {
		if a.Err != "" {
			return "not measured"
		}
		return "—"
	}
	return fmt.Sprintf("%s [%d, %s]", fmtULP(a.LocalULP), a.MaxULP, fmtULP(a.ScaleULP))
}

func fmtElement(e []int64) string {
	if len(e) == 0 {
		return "—"
	}
	return fmt.Sprint(e)
}

func writeAuditMarkdown(w io.Writer, r *AuditReport) error {
	names := r.sideNames()
	fmt.Fprintf(w, "# bitalign audit\n\n**%s**\n\n", r.Headline())
	fmt.Fprintf(w, "- A: %s `%s`\n- B: %s `%s`\n- model %s; %d (op, step, seq) measured in %.2fs; margin %g\n\n",
		names[0], r.A.Path, names[1], r.B.Path, r.Model, r.Measured, r.Elapsed.Seconds(), r.Margin)
	if len(r.Suspects) > 0 {
		fmt.Fprintln(w, "## Suspects\n\n| # | op | side | seq | pos | element | local | floor | ×floor | max ULP | at scale | rule |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
		for i, s := range r.Suspects {
			fmt.Fprintf(w, "| %d | `%s` | %s | %d | %d | %s | %s | %s | %s | %d | %s | %s |\n", i+1, s.Op, s.SideName, s.Seq,
				s.Pos, fmtElement(s.Element), fmtULP(s.LocalULP), fmtULP(s.NoiseFloorULP), fmtRatio(s.Ratio), s.LocalMaxULP,
				fmtULP(s.LocalScaleULP), s.Rule)
		}
		fmt.Fprintln(w)
		for i, s := range r.Suspects {
			fmt.Fprintf(w, "%d. %s\n", i+1, s.Evidence)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "## Local error per op\n\nULPs (docs/audit.md); max element ULP and ULPs at the row's scale in brackets.\n\n| # | op | dtype | %s | floor | %s | floor | engine |\n|---|---|---|---|---|---|---|---|\n", names[0], names[1])
	for _, o := range r.Ops {
		fmt.Fprintf(w, "| %d | `%s` | %s | %s | %s | %s | %s | %s |\n", o.Index, o.Op, o.dtype(), o.Sides[0].cell(),
			fmtULP(o.Sides[0].FloorULP), o.Sides[1].cell(), fmtULP(o.Sides[1].FloorULP),
			fmtULP(max(o.Sides[0].EngineLocalULP, o.Sides[1].EngineLocalULP)))
	}
	return nil
}

// The JSON report (docs/audit.md, schema AuditSchemaVersion).
type auditJSON struct {
	Schema    int           `json:"schema"`
	A         CaptureInfo   `json:"a"`
	B         CaptureInfo   `json:"b"`
	Model     string        `json:"model"`
	Margin    float64       `json:"margin"`
	Measured  int           `json:"measured"`
	ElapsedMS int64         `json:"elapsed_ms"`
	Headline  string        `json:"headline"`
	Suspects  []suspectJSON `json:"suspects"`
	Ops       []auditOpJSON `json:"ops"`
}

type suspectJSON struct {
	Op            string  `json:"op"`
	Index         int     `json:"index"`
	Side          string  `json:"side"`
	SideName      string  `json:"side_name"`
	Step          int64   `json:"step"`
	Seq           int64   `json:"seq"`
	Pos           int64   `json:"pos"`
	Element       []int64 `json:"element"`
	LocalULP      float64 `json:"local_ulp"`
	LocalMaxULP   uint64  `json:"local_max_ulp"`
	LocalScaleULP float64 `json:"local_scale_ulp"`
	NoiseFloorULP float64 `json:"noise_floor_ulp"`
	Ratio         float64 `json:"ratio"`
	Rule          string  `json:"rule"`
	Evidence      string  `json:"evidence"`
}

type auditOpJSON struct {
	Op     string        `json:"op"`
	Index  int           `json:"index"`
	Family string        `json:"family"`
	Layer  int           `json:"layer"`
	A      auditSideJSON `json:"a"`
	B      auditSideJSON `json:"b"`
}

type auditSideJSON struct {
	Error          string   `json:"error,omitempty"`
	DType          string   `json:"dtype,omitempty"`
	Positions      int      `json:"positions"`
	Elements       int64    `json:"elements"`
	Inexact        int64    `json:"inexact"`
	OutOfTolerance int64    `json:"out_of_tolerance"`
	MaxULP         uint64   `json:"max_ulp"`
	LocalULP       *float64 `json:"local_ulp,omitempty"`
	ScaleULP       *float64 `json:"scale_ulp,omitempty"`
	EngineLocalULP *float64 `json:"engine_local_ulp,omitempty"`
	NoiseFloorULP  *float64 `json:"noise_floor_ulp,omitempty"`
}

func (a *AuditSide) json() auditSideJSON {
	j := auditSideJSON{Error: a.Err, DType: a.DType, Positions: a.Positions, Elements: a.Elements, Inexact: a.Inexact,
		OutOfTolerance: a.OutOfTolerance, MaxULP: a.MaxULP}
	if !a.measured() {
		if j.Error == "" {
			j.Error = "not captured on this side"
		}
		return j
	}
	pf := func(x float64) *float64 { return &x }
	j.LocalULP, j.ScaleULP, j.NoiseFloorULP = pf(a.LocalULP), pf(a.ScaleULP), pf(a.FloorULP)
	if a.EngineLocalULP >= 0 {
		j.EngineLocalULP = pf(a.EngineLocalULP)
	}
	return j
}

func writeAuditJSON(w io.Writer, r *AuditReport) error {
	j := auditJSON{Schema: r.Schema, A: r.A, B: r.B, Model: r.Model, Margin: r.Margin, Measured: r.Measured,
		ElapsedMS: r.Elapsed.Milliseconds(), Headline: r.Headline(), Suspects: []suspectJSON{}, Ops: []auditOpJSON{}}
	for _, s := range r.Suspects {
		j.Suspects = append(j.Suspects, suspectJSON{Op: s.Op, Index: s.Index, Side: [...]string{"a", "b"}[s.Side],
			SideName: s.SideName, Step: s.Step, Seq: s.Seq, Pos: s.Pos, Element: s.Element, LocalULP: s.LocalULP, LocalMaxULP: s.LocalMaxULP,
			LocalScaleULP: s.LocalScaleULP, NoiseFloorULP: s.NoiseFloorULP, Ratio: s.Ratio, Rule: s.Rule, Evidence: s.Evidence})
	}
	for _, o := range r.Ops {
		j.Ops = append(j.Ops, auditOpJSON{Op: o.Op, Index: o.Index, Family: o.Family, Layer: o.Layer,
			A: o.Sides[0].json(), B: o.Sides[1].json()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(j)
}

var auditHTML = template.Must(template.New("audit").Funcs(template.FuncMap{"ulp": fmtULP, "el": fmtElement,
	"inc": func(i int) int { return i + 1 }, "ratio": fmtRatio,
	"bar": func(x, floor float64) float64 {
		if floor <= 0 || x <= 0 {
			return 0
		}
		return min(100, 100*x/(floor*DefaultAuditMargin*4))
	}}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bitalign audit</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1b1b1b}
h1{font-size:1.4em}code,td.n{font-family:ui-monospace,monospace}
table{border-collapse:collapse;margin:1em 0}td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right}tr.suspect td{background:#fde8e8}.head{font-weight:600;padding:.6em;background:#f3f3f3}
.bar{display:inline-block;height:.7em;background:#c0392b;vertical-align:middle}
</style></head><body>
<h1>bitalign audit</h1>
<p class="head">{{.Headline}}</p>
<p>A: {{.NameA}} <code>{{.R.A.Path}}</code><br>B: {{.NameB}} <code>{{.R.B.Path}}</code><br>
model {{.R.Model}}; {{.R.Measured}} (op, step, seq) measured; margin {{.R.Margin}}</p>
{{if .R.Suspects}}<h2>Suspects</h2>
<table><tr><th>#</th><th>op</th><th>side</th><th>seq</th><th>pos</th><th>element</th><th>local (ULP)</th><th>floor</th><th>× floor</th><th>max ULP</th><th>rule</th></tr>
{{range $i, $s := .R.Suspects}}<tr><td class="n">{{inc $i}}</td><td><code>{{$s.Op}}</code></td><td>{{$s.SideName}}</td><td class="n">{{$s.Seq}}</td><td class="n">{{$s.Pos}}</td><td>{{el $s.Element}}</td><td class="n">{{ulp $s.LocalULP}}</td><td class="n">{{ulp $s.NoiseFloorULP}}</td><td class="n">{{ratio $s.Ratio}}</td><td class="n">{{$s.LocalMaxULP}}</td><td>{{$s.Rule}}</td></tr>
{{end}}</table>
<ol>{{range .R.Suspects}}<li>{{.Evidence}}</li>{{end}}</ol>{{end}}
<h2>Local error per op</h2>
<p>Local error in ULPs (docs/audit.md; max element ULP and ULPs at the row's scale in brackets); the bar is the error against 32× the noise floor.</p>
<table><tr><th>#</th><th>op</th><th>dtype</th><th>{{.NameA}}</th><th></th><th>floor</th><th>{{.NameB}}</th><th></th><th>floor</th></tr>
{{range .Rows}}<tr{{if .Suspect}} class="suspect"{{end}}><td class="n">{{.Op.Index}}</td><td><code>{{.Op.Op}}</code></td><td>{{.DType}}</td>
<td class="n">{{.CellA}}</td><td><span class="bar" style="width:{{bar .A.LocalULP .A.FloorULP}}px"></span></td><td class="n">{{ulp .A.FloorULP}}</td>
<td class="n">{{.CellB}}</td><td><span class="bar" style="width:{{bar .B.LocalULP .B.FloorULP}}px"></span></td><td class="n">{{ulp .B.FloorULP}}</td></tr>
{{end}}</table></body></html>
`))

func writeAuditHTML(w io.Writer, r *AuditReport) error {
	type row struct {
		Op                  *AuditOp
		A, B                *AuditSide
		DType, CellA, CellB string
		Suspect             bool
	}
	sus := map[string]bool{}
	for _, s := range r.Suspects {
		sus[s.Op] = true
	}
	names := r.sideNames()
	data := struct {
		R            *AuditReport
		Headline     string
		NameA, NameB string
		Rows         []row
	}{R: r, Headline: r.Headline(), NameA: names[0], NameB: names[1]}
	for i := range r.Ops {
		o := &r.Ops[i]
		data.Rows = append(data.Rows, row{Op: o, A: &o.Sides[0], B: &o.Sides[1], DType: o.dtype(), CellA: o.Sides[0].cell(),
			CellB: o.Sides[1].cell(), Suspect: sus[o.Op]})
	}
	return auditHTML.Execute(w, data)
}
