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
	if r.Identical {
		icon = "✅"
	}
	fmt.Fprintf(&b, "### %s %s: %s\n\n", icon, r.Title(), mdEscape(verdict(r)))
	fmt.Fprintf(&b, "| | A | B |\n|---|---|---|\n")
	row := func(name, a, b2 string) { fmt.Fprintf(&b, "| %s | %s | %s |\n", name, a, b2) }
	row("side", mdEscape(r.A.Side), mdEscape(r.B.Side))
	row("path", "`"+mdEscape(r.A.Path)+"`", "`"+mdEscape(r.B.Path)+"`")
	row("tensors", fmt.Sprint(r.A.Tensors), fmt.Sprint(r.B.Tensors))
	row("size", byteSize(r.A.Bytes), byteSize(r.B.Bytes))
	row("tp / pp / dp", fmt.Sprintf("%d / %d / %d", max(r.A.TP, 1), max(r.A.PP, 1), max(r.A.DP, 1)),
		fmt.Sprintf("%d / %d / %d", max(r.B.TP, 1), max(r.B.PP, 1), max(r.B.DP, 1)))
	row("kernel profile", mdEscape(r.A.KernelProfile), mdEscape(r.B.KernelProfile))
	row("batch", fmt.Sprint(r.A.BatchSize), fmt.Sprint(r.B.BatchSize))
	fmt.Fprintf(&b, "\nCompared %d elements in %s: %d mismatched in %s; %s.\n", r.Compared, plural(len(r.Ops), "op"),
		r.Mismatched, plural(len(r.Divergent()), "op"), plural(len(r.Missing), "missing tensor"))
	if f := r.First; f != nil {
		fmt.Fprintf(&b, "\n**First divergence:** `%s` [%s] (index %d, %s) at %s\n\n", mdEscape(f.Op), mdEscape(f.Role), f.Index, f.DType, where(f.At))
		fmt.Fprintf(&b, "| | hex | value |\n|---|---|---|\n| A | `%s` | %s |\n| B | `%s` | %s |\n\n", f.A.Hex, f.A.Decimal, f.B.Hex, f.B.Decimal)
		fmt.Fprintf(&b, "Distance: %s ULP (%s)", ulpString(f.ULP), f.Class)
		if f.Cause != CauseNone {
			fmt.Fprintf(&b, "; cause: **%s** (%s)", f.Cause, mdEscape(f.Detail))
		}
		b.WriteString(".\n")
	}
	b.WriteString("\n| " + strings.Join(opHeader, " | ") + " |\n|" + strings.Repeat("---|", len(opHeader)) + "\n")
	folded := 0
	for i := range r.Ops {
		o := &r.Ops[i]
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
	for i := range r.Ops {
		if o := &r.Ops[i]; o.Detail != "" {
			fmt.Fprintf(&b, "\n`%s` [%s]: %s\n", mdEscape(o.Op), mdEscape(o.Role), mdEscape(o.Detail))
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "\n<details><summary>Missing tensors (%d)</summary>\n\n", len(r.Missing))
		for i, m := range r.Missing {
			if i == maxMissingListed {
				fmt.Fprintf(&b, "- ... and %d more (see the JSON report)\n", len(r.Missing)-i)
				break
			}
			fmt.Fprintf(&b, "- %s\n", mdEscape(missingLine(m)))
		}
		b.WriteString("\n</details>\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
