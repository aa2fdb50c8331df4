package session

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"bitalign/logprobs"
)

// writeRLText writes the logprob section of the text report.
func writeRLText(b io.Writer, r *RLReport) error {
	fmt.Fprintf(b, "\nLogprobs (docs/rl-metrics.md; Δ = A − B):\n")
	for _, l := range r.lines() {
		fmt.Fprintf(b, "  %s\n", l)
	}
	shown := r.ShownSeqs()
	if len(shown) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\nWorst sequences (%d of %d):\n", len(shown), len(r.Seqs))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(rlSeqHeader, "\t"))
	for i := range shown {
		fmt.Fprintln(tw, "  "+strings.Join(r.seqRow(&shown[i]), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l := r.RecordLine(); l != "" && !r.Captures {
		fmt.Fprintf(b, "\nTo record these sequences in full next time (docs/capturing.md), before their forward:\n  %s\n", l)
	}
	return nil
}

// writeRLMarkdown writes the logprob section of the Markdown report.
func writeRLMarkdown(b io.Writer, r *RLReport) {
	fmt.Fprintf(b, "\n**Logprobs** (Δ = A − B, docs/rl-metrics.md)\n\n")
	for _, l := range r.lines() {
		fmt.Fprintf(b, "- %s\n", mdEscape(l))
	}
	shown := r.ShownSeqs()
	if len(shown) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWorst sequences (%d of %d):\n\n", len(shown), len(r.Seqs))
	head := make([]string, len(rlSeqHeader))
	for i, h := range rlSeqHeader {
		head[i] = mdEscape(h)
	}
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for i := range shown {
		cells := r.seqRow(&shown[i])
		for j := range cells {
			cells[j] = mdEscape(cells[j])
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	if l := r.RecordLine(); l != "" && !r.Captures {
		fmt.Fprintf(b, "\nTo record these sequences in full next time:\n\n```python\n%s\n```\n", l)
	}
}

// htmlRL is the logprob section of the HTML report.
type htmlRL struct {
	Lines   []string
	Header  []string
	Rows    [][]string
	Total   int
	Record  string
	Hist    htmlPicture
	HistAx  string
	Strips  []htmlPicture
	Legend  []htmlLegend
	Summary string
}

type htmlPicture struct {
	Caption string
	PNG     template.URL
	W, H    int
}

var htmlRLTmpl = template.Must(template.New("rl").Parse(`<h2>Logprobs</h2>
<p>Δ = A − B per token; the metrics are defined in docs/rl-metrics.md.</p>
<ul>
{{range .Lines}}<li>{{.}}</li>
{{end}}</ul>
{{if .Hist.PNG}}<figure>
<figcaption>{{.Hist.Caption}}</figcaption>
<img src="{{.Hist.PNG}}" width="{{.Hist.W}}" height="{{.Hist.H}}" alt="distribution of Δ">
<div>{{.HistAx}}</div>
</figure>
{{end}}{{if .Rows}}<h2>Worst sequences ({{len .Rows}} of {{.Total}})</h2>
<table>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{if .Record}}<p>To record these sequences in full next time: <code>{{.Record}}</code></p>
{{end}}{{if .Strips}}<h3>|Δ| along the positions of the worst sequences</h3>
<div class="legend">{{range .Legend}}<span><i style="background: {{.Color}}"></i>{{.Label}}</span>{{end}}</div>
{{range .Strips}}<figure>
<figcaption>{{.Caption}}</figcaption>
<img src="{{.PNG}}" width="{{.W}}" height="{{.H}}" alt="{{.Caption}}">
</figure>
{{end}}{{end}}`))

// writeRLHTML renders the logprob section: figures, the Δ distribution (counts on a log scale, |Δ| by decade
// for each sign) and a strip per worst sequence of |Δ| along its positions, coloured by decade.
func writeRLHTML(r *RLReport) (template.HTML, error) {
	d := htmlRL{Lines: r.lines(), Header: rlSeqHeader, Total: len(r.Seqs)}
	for _, q := range r.ShownSeqs() {
		d.Rows = append(d.Rows, r.seqRow(&q))
	}
	if !r.Captures {
		d.Record = r.RecordLine()
	}
	var err error
	if d.Hist, err = histPNG(&r.Hist); err != nil {
		return "", err
	}
	d.HistAx = fmt.Sprintf("left: Δ < 0 (B above A), |Δ| from 10^%d (outer) down to 10^%d; centre: Δ = 0 (%d tokens); right: Δ > 0 up to 10^%d. Bar height: log10(1 + count).",
		logprobs.DeltaHistLo+logprobs.DeltaBins, logprobs.DeltaHistLo, r.Hist.Zero, logprobs.DeltaHistLo+logprobs.DeltaBins)
	for i := range r.Seqs {
		q := &r.Seqs[i]
		if len(q.DetailAbs) == 0 {
			continue
		}
		p, err := stripPNG(q)
		if err != nil {
			return "", err
		}
		d.Strips = append(d.Strips, p)
	}
	if len(d.Strips) > 0 {
		d.Legend = append(d.Legend, htmlLegend{cssColor(LevelColor(LevelEqual)), "equal"})
		for j := 0; j < logprobs.DeltaBins; j += 2 {
			d.Legend = append(d.Legend, htmlLegend{cssColor(decadeColor(j)), fmt.Sprintf("|Δ| ≈ 1e%d", j+logprobs.DeltaHistLo)})
		}
		d.Legend = append(d.Legend, htmlLegend{cssColor(LevelColor(LevelNaN)), "NaN or ±Inf"})
	}
	var b bytes.Buffer
	if err := htmlRLTmpl.Execute(&b, d); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil
}

func cssColor(c color.RGBA) template.CSS {
	return template.CSS(fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B))
}

// decadeColor is the colour of DeltaHist bin j: the heatmaps' ramp, spread over the decades.
func decadeColor(j int) color.RGBA {
	return LevelColor(1 + j*23/(logprobs.DeltaBins-1))
}

func pngURL(img image.Image) (template.URL, error) {
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		return "", err
	}
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())), nil
}

// histPNG draws the Δ distribution: 2·DeltaBins + 1 bars (negative decades, largest |Δ| leftmost; zero;
// positive decades), heights log10(1 + count).
func histPNG(h *logprobs.DeltaHist) (htmlPicture, error) {
	const bw, height = 16, 160
	n := 2*logprobs.DeltaBins + 1
	counts := make([]int64, 0, n)
	for j := logprobs.DeltaBins - 1; j >= 0; j-- {
		counts = append(counts, h.Neg[j])
	}
	counts = append(counts, h.Zero)
	counts = append(counts, h.Pos[:]...)
	top := 0.0
	for _, c := range counts {
		top = max(top, math.Log10(1+float64(c)))
	}
	if top == 0 {
		return htmlPicture{}, nil
	}
	img := image.NewRGBA(image.Rect(0, 0, n*bw, height))
	for y := range height {
		for x := range n * bw {
			img.SetRGBA(x, y, color.RGBA{0xff, 0xff, 0xff, 0xff})
		}
	}
	var total int64
	for i, c := range counts {
		total += c
		bar := int(math.Round(float64(height-4) * math.Log10(1+float64(c)) / top))
		col := color.RGBA{0x9c, 0xa3, 0xaf, 0xff}
		switch {
		case i < logprobs.DeltaBins:
			col = decadeColor(logprobs.DeltaBins - 1 - i)
		case i > logprobs.DeltaBins:
			col = decadeColor(i - logprobs.DeltaBins - 1)
		}
		for y := height - bar; y < height; y++ {
			for x := i*bw + 1; x < (i+1)*bw-1; x++ {
				img.SetRGBA(x, y, col)
			}
		}
	}
	u, err := pngURL(img)
	return htmlPicture{Caption: fmt.Sprintf("Distribution of Δ over %d finite token pairs", total), PNG: u, W: n * bw, H: height}, err
}

// stripPNG draws one sequence's |Δ| along its positions: one column of pixels (or more) per position.
func stripPNG(q *logprobs.SeqStats) (htmlPicture, error) {
	const width, height = 512, 14
	lo, hi := q.PosLo, q.PosHi
	n := int(hi - lo)
	if n <= 0 {
		return htmlPicture{}, nil
	}
	w := min(width, max(n, 1)*max(1, width/n))
	img := image.NewRGBA(image.Rect(0, 0, w, height))
	level := make([]int, w) // −1 equal; DeltaBins: non-finite; else the decade
	for x := range level {
		level[x] = -1
	}
	for i, p := range q.DetailPos {
		x := int(int64(int(int64(p)-lo)) * int64(w) / int64(n))
		a := q.DetailAbs[i]
		l := -1
		switch {
		case a != a:
			l = logprobs.DeltaBins
		case a > 0:
			l = max(0, min(logprobs.DeltaBins-1, int(math.Floor(math.Log10(float64(a))))-logprobs.DeltaHistLo))
		}
		x2 := int(int64(int(int64(p)-lo)+1) * int64(w) / int64(n))
		for xx := x; xx < max(x+1, x2) && xx < w; xx++ {
			level[xx] = max(level[xx], l)
		}
	}
	for x, l := range level {
		col := LevelColor(LevelEqual)
		switch {
		case l == logprobs.DeltaBins:
			col = LevelColor(LevelNaN)
		case l >= 0:
			col = decadeColor(l)
		}
		for y := range height {
			img.SetRGBA(x, y, col)
		}
	}
	u, err := pngURL(img)
	return htmlPicture{Caption: fmt.Sprintf("seq %d: positions %d–%d, max |Δ| %s at %d, first difference at %s", q.Seq, lo, hi-1,
		sci(q.MaxAbs), q.MaxAbsPos, firstDiffString(q)), PNG: u, W: w, H: height}, err
}
