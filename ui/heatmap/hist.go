package heatmap

import (
	"fmt"
	"strings"

	"bitalign/ui/theme"
)

// bucketLabel names a log2 difference bucket: 0 equal, 1, 2–3, 4–7, …
func bucketLabel(b int) string {
	switch b {
	case 0:
		return "equal"
	case 1:
		return "1"
	}
	lo := uint64(1) << (b - 1)
	return fmt.Sprintf("%s–%s", short(lo), short(2*lo-1))
}

// short writes a bucket bound in at most 5 cells, in the largest unit (k, M, G, T, P, E: each 1024 of the one
// before) that keeps 4 digits: 1023, 2047, 8191, 15k, 1023k, 2047k, 15M, 8192P.
func short(u uint64) string {
	unit := -1
	for u >= 10000 {
		u >>= 10
		unit++
	}
	if unit < 0 {
		return fmt.Sprint(u)
	}
	return fmt.Sprintf("%d%c", u, "kMGTPE"[unit])
}

// pctW is the width of a percentage as the histogram writes it: "100.0%".
const pctW = 6

// Histogram draws the difference histogram, one bar per non-empty bucket, w×h; when there are more buckets
// than rows the largest buckets are merged into the last row. Floats are bucketed by log2 ULP; for an integer
// tensor (integer) every differing element is one row, "differ", since the size of a difference between token
// or expert ids means nothing. The counts and percentages are never cut: on a narrow panel the bar goes first,
// then the labels, then the counts (the percentages fit from 6 cells on).
func Histogram(st theme.Styles, hist [65]uint64, integer bool, w, h int) string {
	if integer {
		var differ uint64
		for _, n := range hist[1:] {
			differ += n
		}
		hist = [65]uint64{0: hist[0], 1: differ}
	}
	var total, peak uint64
	var used []int
	for b, n := range hist {
		if n > 0 {
			used = append(used, b)
			total += n
			peak = max(peak, n)
		}
	}
	if total == 0 || h <= 0 {
		return strings.Join(theme.FitLines(st.Muted.Render("no elements"), w, h), "\n")
	}
	type row struct {
		label string
		n     uint64
		level int
		equal bool
	}
	var rows []row
	for i, b := range used {
		r := row{label: bucketLabel(b), n: hist[b], level: theme.ValueLevel(uint8(b), integer), equal: b == 0}
		if integer && b == 1 {
			r.label = "differ"
		}
		if i == h-1 && len(used) > h {
			// merge the tail; with room for one row only, that row counts the differing elements
			from := used[i:]
			if b == 0 {
				from, b = used[i+1:], used[i+1]
			}
			r.n, r.equal = 0, false
			for _, bb := range from {
				r.n += hist[bb]
			}
			r.label = "≥" + short(uint64(1)<<(b-1))
			if b == 1 {
				r.label = "differ"
			}
			r.level = theme.ValueLevel(uint8(used[len(used)-1]), integer)
		}
		rows = append(rows, r)
		if len(rows) == h {
			break
		}
	}
	labelW, countW := 0, 0
	for _, r := range rows {
		labelW = max(labelW, theme.Width(r.label))
		countW = max(countW, len(fmt.Sprint(r.n)))
	}
	// what fits, dropped in this order: the bar, the labels, the counts
	numW := 1 + countW + 1 + pctW
	barW := w - labelW - numW - 1
	showLabel, showCount := true, true
	if barW < 1 {
		barW = 0
		showLabel = w >= labelW+numW
	}
	if !showLabel && w < numW {
		showCount, numW = false, pctW
	}
	glyph := "█"
	if !st.Color {
		glyph = "#"
	}
	var lines []string
	for _, r := range rows {
		var line strings.Builder
		if showLabel {
			line.WriteString(st.Muted.Render(fmt.Sprintf("%*s", labelW, r.label)))
			if barW > 0 {
				line.WriteString(" ")
			}
		}
		if barW > 0 {
			bar := min(int(float64(r.n)/float64(peak)*float64(barW)), barW)
			if r.n > 0 && bar == 0 {
				bar = 1
			}
			style := st.Heat[r.level]
			if r.equal {
				style = st.Muted
			}
			line.WriteString(style.Render(strings.Repeat(glyph, bar)) + strings.Repeat(" ", barW-bar))
		}
		pct := fmt.Sprintf("%5.1f%%", 100*float64(r.n)/float64(total))
		if showCount {
			line.WriteString(st.Text.Render(fmt.Sprintf(" %*d %s", countW, r.n, pct)))
		} else {
			line.WriteString(st.Text.Render(pct))
		}
		lines = append(lines, line.String())
	}
	return strings.Join(theme.FitLines(strings.Join(lines, "\n"), w, h), "\n")
}
