package theme

import (
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

// Fit truncates or pads the (possibly styled) line s to exactly w cells.
func Fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	n := ansi.StringWidth(s)
	if n > w {
		return ansi.Truncate(s, w, "…")
	}
	return s + strings.Repeat(" ", w-n)
}

// FitLines makes body exactly h lines of exactly w cells.
func FitLines(body string, w, h int) []string {
	var lines []string
	if body != "" {
		lines = strings.Split(body, "\n")
	}
	if len(lines) > h {
		lines = lines[:h]
	}
	for i := range lines {
		lines[i] = Fit(lines[i], w)
	}
	for len(lines) < h {
		lines = append(lines, strings.Repeat(" ", max(w, 0)))
	}
	return lines
}

// Panel draws body inside a square border of exactly w×h cells with title set into the top edge
// (square corners: they render in every monospace font, Go Mono included). focused brightens the border.
func (s Styles) Panel(title, body string, w, h int, focused bool) string {
	if w < 4 || h < 2 {
		return strings.Join(FitLines("", max(w, 0), max(h, 0)), "\n")
	}
	border := s.Border
	if focused {
		border = s.Accent
	}
	inner := w - 2
	var top string
	if title != "" {
		t := " " + title + " "
		t = ansi.Truncate(t, max(inner-2, 0), "…")
		rest := inner - 1 - lipgloss.Width(t)
		top = border.Render("┌─") + s.PanelTitle.Render(t) + border.Render(strings.Repeat("─", max(rest, 0))+"┐")
	} else {
		top = border.Render("┌" + strings.Repeat("─", inner) + "┐")
	}
	var b strings.Builder
	b.WriteString(top)
	side := border.Render("│")
	for _, l := range FitLines(body, inner, h-2) {
		b.WriteString("\n")
		b.WriteString(side)
		b.WriteString(l)
		b.WriteString(side)
	}
	b.WriteString("\n")
	b.WriteString(border.Render("└" + strings.Repeat("─", inner) + "┘"))
	return b.String()
}

// JoinColumns places blocks side by side; each block must already be rectangular (FitLines or Panel).
func JoinColumns(blocks ...string) string {
	cols := make([][]string, len(blocks))
	h := 0
	for i, b := range blocks {
		cols[i] = strings.Split(b, "\n")
		h = max(h, len(cols[i]))
	}
	var out strings.Builder
	for y := 0; y < h; y++ {
		if y > 0 {
			out.WriteString("\n")
		}
		for _, c := range cols {
			if y < len(c) {
				out.WriteString(c[y])
			} else if len(c) > 0 {
				out.WriteString(strings.Repeat(" ", lipgloss.Width(c[0])))
			}
		}
	}
	return out.String()
}

// Width is the number of cells s occupies (styles ignored).
func Width(s string) int { return lipgloss.Width(s) }

// Wrap breaks s into lines of at most w cells at spaces (a word longer than w keeps a line of its own).
func Wrap(s string, w int) string {
	if w <= 0 {
		return s
	}
	var out []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > w {
			out = append(out, line)
			line = word
			continue
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(out, line), "\n")
}
