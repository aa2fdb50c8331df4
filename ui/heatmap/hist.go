package heatmap

import (
	"fmt"
	"strings"

	"bitalign/ui/theme"
)

// bucketLabel names a ULP bucket: 0 equal, 1, 2–3, 4–7, …
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

func short(u uint64) string {
	switch {
	case u < 1000:
		return fmt.Sprint(u)
	case u < 1<<20:
		return fmt.Sprintf("%dk", u>>10)
	}
	return fmt.Sprintf("%dM", u>>20)
}

// Histogram draws the ULP histogram, one bar per non-empty bucket, w×h; when there are more buckets than rows
// the largest buckets are merged into the last row.
func Histogram(st theme.Styles, hist [65]uint64, w, h int) string {
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
	const labelW, countW = 10, 14
	barW := max(w-labelW-countW, 1)
	var lines []string
	for i, b := range used {
		n, label, lv := hist[b], bucketLabel(b), theme.Level(uint8(b))
		if i == h-1 && len(used) > h {
			// merge the tail; with room for one row only, that row counts the differing elements
			from := used[i:]
			if b == 0 {
				from, b = used[i+1:], used[i+1]
			}
			n = 0
			for _, bb := range from {
				n += hist[bb]
			}
			label = "≥" + short(uint64(1)<<(b-1))
			if b == 1 {
				label = "differ"
			}
			lv = theme.Level(uint8(used[len(used)-1]))
		}
		bar := int(float64(n) / float64(peak) * float64(barW))
		if n > 0 && bar == 0 {
			bar = 1
		}
		glyph := "█"
		if !st.Color {
			glyph = "#"
		}
		style := st.Heat[lv]
		if b == 0 {
			style = st.Muted
		}
		lines = append(lines, st.Muted.Render(fmt.Sprintf("%9s ", label))+style.Render(strings.Repeat(glyph, min(bar, barW)))+
			strings.Repeat(" ", barW-min(bar, barW))+st.Text.Render(fmt.Sprintf("%8d %4.1f%%", n, 100*float64(n)/float64(total))))
		if len(lines) == h {
			break
		}
	}
	return strings.Join(theme.FitLines(strings.Join(lines, "\n"), w, h), "\n")
}
