package session

import (
	"fmt"
	"io"
	"strings"
)

// mdEscape keeps a cell's text from breaking a Markdown table.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}

// WriteMarkdown writes the report for an issue or a pull request: verdict, captures, first divergence, the
// per-op table (identical ops folded away when there are many) and the missing tensors in a details block.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	icon := "❌"
	if r.Passed() {
		icon = "✅"
	}
	fmt.Fprintf(&b, "### %s %s: %s\n\n", icon, r.Title(), mdEscape(r.Verdict()))
	fmt.Fprintf(&b, "| | A | B |\n|---|---|---|\n")
	for _, c := range captureRows(r) {
		a, b2 := mdEscape(c.A), mdEscape(c.B)
		if c.Code {
			a, b2 = "`"+a+"`", "`"+b2+"`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Name, a, b2)
	}
	if r.TablePair() {
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "\n**Warning:** %s\n", mdEscape(w))
		}
		writeMarkdownCheck(&b, r)
		writeRLMarkdown(&b, r.RL)
		_, err := io.WriteString(w, b.String())
		return err
	}
	if len(r.Filter) > 0 {
		pats := make([]string, len(r.Filter))
		for i, p := range r.Filter {
			pats[i] = "`" + mdEscape(p) + "`"
		}
		fmt.Fprintf(&b, "\nOps matching %s.\n", strings.Join(pats, ", "))
	}
	fmt.Fprintf(&b, "\n%s.\n", upper(summary(r)))
	if n := missingNote(r); n != "" {
		fmt.Fprintf(&b, "\n%s.\n", upper(n))
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "\n**Warning:** %s\n", mdEscape(w))
	}
	if ls := locatedLines(r); len(ls) > 0 {
		fmt.Fprintf(&b, "\n%s.\n", upper(ls[0]))
		if len(ls) > 1 {
			fmt.Fprintf(&b, "\n**Located only** (no values, no ULPs): %s. To record in full next time where they start (the ops not called propagated):\n\n```python\n%s\n```\n",
				mdEscape(strings.Join(r.LocatedOnly, ", ")), r.RecordFull())
		}
	}
	if f := r.First; f != nil {
		fmt.Fprintf(&b, "\n**First divergence:** `%s` [%s] (index %d, %s) at %s\n\n", mdEscape(f.Op), mdEscape(f.Role), f.Index, f.DType, where(f.At))
		if !f.Located {
			fmt.Fprintf(&b, "| | hex | value |\n|---|---|---|\n| A | `%s` | %s |\n| B | `%s` | %s |\n\n", f.A.Hex, f.A.Decimal, f.B.Hex, f.B.Decimal)
		}
		fmt.Fprintf(&b, "Distance: %s", mdEscape(firstDistance(f)))
		if f.Cause != CauseNone {
			fmt.Fprintf(&b, "; cause: **%s** (%s)", f.Cause, mdEscape(f.Detail))
		}
		b.WriteString(".\n")
		if f.Routing != nil {
			fmt.Fprintf(&b, "\n**Routing flip:** %s.\n", mdEscape(f.Routing.String()))
		}
	}
	if rt := r.Routing; rt != nil {
		fmt.Fprintf(&b, "\n**Routing:** %s.\n\n", mdEscape(rt.Summary()))
		b.WriteString("| " + strings.Join(routingHeader, " | ") + " |\n|" + strings.Repeat("---|", len(routingHeader)) + "\n")
		for _, row := range routingRows(rt) {
			for j := range row {
				row[j] = mdEscape(row[j])
			}
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		b.WriteString("\n")
		for _, l := range flipLines(rt) {
			fmt.Fprintf(&b, "- %s\n", mdEscape(l))
		}
	}
	writeMarkdownCheck(&b, r)
	head := make([]string, len(opHeader))
	for i, h := range opHeader {
		head[i] = mdEscape(h)
	}
	b.WriteString("\n| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(opHeader)) + "\n")
	folded := 0
	for i := range r.Ops {
		o := &r.Ops[i]
		if !listed(r, o) {
			continue
		}
		if len(r.Ops) > 40 && o.Status == StatusIdentical {
			folded++
			continue
		}
		cells := opRow(o)
		for j := range cells {
			cells[j] = mdEscape(cells[j])
		}
		cells[1] = "`" + cells[1] + "`"
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if folded > 0 {
		fmt.Fprintf(&b, "\n%s identical, not listed.\n", plural(folded, "op"))
	}
	if n := narrowNote(r); n != "" {
		fmt.Fprintf(&b, "\n%s.\n", mdEscape(n))
	}
	for i := range r.Ops {
		if o := &r.Ops[i]; o.Detail != "" {
			fmt.Fprintf(&b, "\n`%s` [%s]: %s\n", mdEscape(o.Op), mdEscape(o.Role), mdEscape(o.Detail))
		}
	}
	if miss := r.MissingProblems(); len(miss) > 0 {
		fmt.Fprintf(&b, "\n<details><summary>Missing tensors (%d)</summary>\n\n", len(miss))
		writeMissing(&b, miss, "- ", mdEscape)
		b.WriteString("\n</details>\n")
	}
	if r.RL != nil {
		writeRLMarkdown(&b, r.RL)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeMarkdownCheck(b io.Writer, r *Report) {
	if c := r.Check; c != nil {
		fmt.Fprintf(b, "\n**Tolerance: %s**\n\n", map[bool]string{true: "within", false: "outside"}[c.Within])
		for _, l := range checkLines(c) {
			fmt.Fprintf(b, "- %s\n", mdEscape(l))
		}
	}
}
