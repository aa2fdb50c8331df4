package session

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	"image/png"
	"io"
	"strings"
)

type htmlLegend struct {
	Color template.CSS
	Label string
}

type htmlMap struct {
	Op, Role string
	Title    string
	PNG      template.URL
	W, H     int
	Axes     string
}

type htmlData struct {
	Title    string
	Verdict  string
	Passed   bool
	Captures []captureRow
	Filter   string
	Summary  string
	Notes    []string
	First    *Divergence
	FirstAt  string
	Distance string
	Check    string   // "within" or "outside"; "" without a tolerance
	Checks   []string // its lines
	Header   []string
	Rows     [][]string
	Status   []string
	Details  []string
	Maps     []htmlMap
	Legend   []htmlLegend
	Missing  []string
	More     int
	Flip     string // the first divergence's routing flip, "" when it is none
	Routing  *htmlRouting
	Tables   bool          // a logprob-only pair: no ops
	RL       template.HTML // the logprob section (writeRLHTML)
}

type htmlRouting struct {
	Summary string
	Header  []string
	Rows    [][]string
	Lines   []string
}

var htmlTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}: {{.Verdict}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #111827; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
.ok { color: #15803d; } .bad { color: #b91c1c; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #d1d5db; padding: 2px 8px; text-align: left; font-variant-numeric: tabular-nums; }
th { background: #f3f4f6; }
tr.divergent td { background: #fef2f2; } tr.missing_in_a td, tr.missing_in_b td, tr.shape_mismatch td, tr.incomplete td { background: #fffbeb; }
code { font: 13px ui-monospace, monospace; }
.legend span { display: inline-block; margin: 0 10px 4px 0; } .legend i { display: inline-block; width: 14px; height: 14px; vertical-align: -2px; margin-right: 4px; border: 1px solid #9ca3af; }
figure { margin: 1em 0; } figure img { image-rendering: pixelated; border: 1px solid #d1d5db; }
</style>
</head>
<body>
<h1 class="{{if .Passed}}ok{{else}}bad{{end}}">{{.Title}}: {{.Verdict}}</h1>
<table>
<tr><th></th><th>A</th><th>B</th></tr>
{{range .Captures}}<tr><th>{{.Name}}</th>{{if .Code}}<td><code>{{.A}}</code></td><td><code>{{.B}}</code></td>{{else}}<td>{{.A}}</td><td>{{.B}}</td>{{end}}</tr>
{{end}}</table>
{{with .Filter}}<p>Ops matching <code>{{.}}</code>.</p>
{{end}}{{with .Summary}}<p>{{.}}</p>{{end}}
{{range .Notes}}<p>{{.}}</p>
{{end}}{{with .First}}<h2>First divergence</h2>
<p><code>{{.Op}}</code> [{{.Role}}] (index {{.Index}}, {{.DType}}) at {{$.FirstAt}}</p>
{{if not .Located}}<table>
<tr><th></th><th>hex</th><th>value</th></tr>
<tr><th>A</th><td><code>{{.A.Hex}}</code></td><td>{{.A.Decimal}}</td></tr>
<tr><th>B</th><td><code>{{.B.Hex}}</code></td><td>{{.B.Decimal}}</td></tr>
</table>{{end}}
<p>Distance: {{$.Distance}}{{if .Cause}}; cause: <b>{{.Cause}}</b> ({{.Detail}}){{end}}.</p>
{{with $.Flip}}<p>Routing flip: {{.}}.</p>
{{end}}{{end}}{{with .Routing}}<h2>Routing</h2>
<p>{{.Summary}}.</p>
<table>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<ul>
{{range .Lines}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{if .Check}}<h2>Tolerance: {{.Check}}</h2>
<ul>
{{range .Checks}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{if not .Tables}}<h2>Ops</h2>
<table>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range $i, $r := .Rows}}<tr class="{{index $.Status $i}}">{{range $r}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
{{range .Details}}<p>{{.}}</p>
{{end}}{{if .Maps}}<h2>Where the mismatches are</h2>
<p>Each picture covers one divergent op over every step and sequence: token positions down, features across; a
cell's colour is the largest ULP distance of its elements.</p>
<div class="legend">{{range .Legend}}<span><i style="background: {{.Color}}"></i>{{.Label}}</span>{{end}}</div>
{{range .Maps}}<figure>
<figcaption><code>{{.Op}}</code> [{{.Role}}]: {{.Title}}</figcaption>
<img src="{{.PNG}}" width="{{.W}}" height="{{.H}}" alt="mismatch heatmap of {{.Op}}">
<div>{{.Axes}}</div>
</figure>
{{end}}{{end}}{{if .Missing}}<h2>Missing tensors ({{len .Missing}}{{if .More}} of {{.More}}{{end}})</h2>
<ul>
{{range .Missing}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{.RL}}</body>
</html>
`))

// WriteHTML writes one self-contained HTML file: captures, first divergence, the per-op table and, per
// divergent op, a heatmap picture (PNG inlined as base64) of where its mismatches are, with a legend.
func WriteHTML(w io.Writer, r *Report) error {
	d := htmlData{Title: r.Title(), Verdict: r.Verdict(), Passed: r.Passed(), Captures: captureRows(r), First: r.First, Header: opHeader,
		Filter: strings.Join(r.Filter, ", "), Summary: upper(summary(r)) + "."}
	if n := missingNote(r); n != "" {
		d.Notes = append(d.Notes, upper(n)+".")
	}
	if r.RL != nil {
		var err error
		if d.RL, err = writeRLHTML(r.RL); err != nil {
			return err
		}
	}
	if d.Tables = r.TablePair(); d.Tables {
		d.Summary = ""
	}
	if n := narrowNote(r); n != "" {
		d.Notes = append(d.Notes, n+".")
	}
	for _, w := range r.Warnings {
		d.Notes = append(d.Notes, "Warning: "+w)
	}
	for _, l := range locatedLines(r) {
		d.Notes = append(d.Notes, upper(l)+".")
	}
	if r.First != nil {
		d.FirstAt = where(r.First.At)
		d.Distance = firstDistance(r.First)
		if r.First.Routing != nil {
			d.Flip = r.First.Routing.String()
		}
	}
	if rt := r.Routing; rt != nil {
		d.Routing = &htmlRouting{Summary: rt.Summary(), Header: routingHeader, Rows: routingRows(rt), Lines: flipLines(rt)}
	}
	if c := r.Check; c != nil {
		d.Check = map[bool]string{true: "within", false: "outside"}[c.Within]
		d.Checks = checkLines(c)
	}
	top, nan := 0, false
	for i := range r.Ops {
		o := &r.Ops[i]
		if !listed(r, o) {
			continue
		}
		d.Rows = append(d.Rows, opRow(o))
		d.Status = append(d.Status, string(o.Status))
		if o.Detail != "" {
			d.Details = append(d.Details, fmt.Sprintf("%s [%s]: %s", o.Op, o.Role, o.Detail))
		}
		if o.Map == nil {
			continue
		}
		img, w, h, err := mapPNG(o.Map)
		if err != nil {
			return err
		}
		for _, c := range o.Map.Cells {
			if int(c) == LevelNaN {
				nan = true
			} else {
				top = max(top, int(c))
			}
		}
		d.Maps = append(d.Maps, htmlMap{Op: o.Op, Role: o.Role, PNG: template.URL(img), W: w, H: h,
			Title: fmt.Sprintf("%d of %d elements differ, %s", o.Mismatched, o.Elements, distance(o)),
			Axes: fmt.Sprintf("positions %d–%d (%d rows of cells) × features 0–%d (%d columns of cells)",
				o.Map.PosLo, o.Map.PosHi-1, o.Map.Rows, o.Map.Features-1, o.Map.Cols)})
	}
	if len(d.Maps) > 0 {
		for l := 0; l <= top; l++ {
			c := LevelColor(l)
			d.Legend = append(d.Legend, htmlLegend{template.CSS(fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)), LevelLabel(l)})
		}
		if nan {
			c := LevelColor(LevelNaN)
			d.Legend = append(d.Legend, htmlLegend{template.CSS(fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)), LevelLabel(LevelNaN)})
		}
	}
	miss := r.MissingProblems()
	for i, m := range miss {
		if i == 10*maxMissingListed {
			d.More = len(miss)
			break
		}
		d.Missing = append(d.Missing, missingLine(m))
	}
	var b bytes.Buffer
	if err := htmlTmpl.Execute(&b, d); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// mapPNG draws a mismatch map, each cell a block of pixels, as a data: URL.
func mapPNG(m *Map) (string, int, int, error) {
	sx := max(1, 512/m.Cols)
	sy := max(1, min(8, 256/m.Rows))
	img := image.NewRGBA(image.Rect(0, 0, m.Cols*sx, m.Rows*sy))
	for r := 0; r < m.Rows; r++ {
		for c := 0; c < m.Cols; c++ {
			col := LevelColor(int(m.Cells[r*m.Cols+c]))
			for y := r * sy; y < (r+1)*sy; y++ {
				for x := c * sx; x < (c+1)*sx; x++ {
					img.SetRGBA(x, y, col)
				}
			}
		}
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		return "", 0, 0, err
	}
	var s strings.Builder
	s.WriteString("data:image/png;base64,")
	s.WriteString(base64.StdEncoding.EncodeToString(b.Bytes()))
	return s.String(), m.Cols * sx, m.Rows * sy, nil
}
