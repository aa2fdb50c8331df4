// Package help draws the help screen from the key table (ui/keys), one column per group, and the one-line
// short help at the bottom of every screen.
package help

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/help"

	"bitalign/ui/keys"
	"bitalign/ui/theme"
)

// View draws every key of keys.Table in w×h, scrolled down by off lines: groups flow into as many columns as
// fit, in table order.
func View(st theme.Styles, w, h, off int) string {
	var groups [][]string
	colW := 0
	for _, g := range keys.Groups {
		lines := []string{st.PanelTitle.Render(g)}
		for _, e := range keys.Table {
			if e.Group != g {
				continue
			}
			lines = append(lines, st.Key.Render(fmt.Sprintf("%-7s", e.Binding.Help().Key))+" "+st.Text.Render(e.Binding.Help().Desc))
		}
		for _, l := range lines {
			colW = max(colW, theme.Width(l))
		}
		groups = append(groups, lines)
	}
	colW += 4
	ncols := max(1, min(len(groups), w/colW))
	// split the groups, in order, into ncols columns of about equal height
	total := 0
	for _, g := range groups {
		total += len(g) + 1
	}
	var cols [][]string
	var cur []string
	for _, g := range groups {
		if len(cur) > 0 && len(cols) < ncols-1 && len(cur)+len(g)/2 > total/ncols {
			cols = append(cols, cur)
			cur = nil
		}
		if len(cur) > 0 {
			cur = append(cur, "")
		}
		cur = append(cur, g...)
	}
	cols = append(cols, cur)
	rows := 0
	for _, c := range cols {
		rows = max(rows, len(c))
	}
	blocks := make([]string, len(cols))
	for i, c := range cols {
		blocks[i] = strings.Join(theme.FitLines(strings.Join(c, "\n"), colW, rows), "\n")
	}
	body := theme.JoinColumns(blocks...)
	body += "\n\n" + st.Muted.Render("mouse: click an op to select it, again to open it; click a heatmap cell; wheel scrolls") +
		"\n" + st.Faint.Render("press ? or esc to close")
	lines := strings.Split(body, "\n")
	off = max(0, min(off, len(lines)-h))
	lines = lines[off:]
	if len(lines) > h && h > 0 {
		lines = append(lines[:h-1], st.Accent.Render("↓ more (j/↓ scrolls)"))
	}
	return strings.Join(theme.FitLines(strings.Join(lines, "\n"), w, h), "\n")
}

// Short is the one-line help at the bottom of the screen in context c.
func Short(st theme.Styles, c keys.Context, w int) string {
	m := help.New()
	m.SetWidth(w)
	m.Styles.ShortKey = st.Key
	m.Styles.ShortDesc = st.KeyDesc
	m.Styles.ShortSeparator = st.Faint
	m.Styles.Ellipsis = st.Faint
	return m.ShortHelpView(keys.ShortFor(c))
}
