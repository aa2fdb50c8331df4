// Package bits draws one element of a tensor pair bit by bit: each side's value in decimal and hex, its sign,
// exponent and mantissa fields with the bits that differ from the reference highlighted (and marked with ^ on
// the line below, which survives on terminals without colour), the ULP distance and the relative error (for an
// integer: the two values and whether they differ).
package bits

import (
	"fmt"
	"math"
	"strings"

	"charm.land/lipgloss/v2"

	"bitalign/internal/fp"
	"bitalign/ui/theme"
)

// Value is one row: a label and the element's bits.
type Value struct {
	Label string
	Bits  uint64
	Ref   int // index of the row this one is compared with (-1: none); differing bits are highlighted
	Note  string
}

// Element is what the bit view shows.
type Element struct {
	Format fp.Format
	// ULPIn, when set, is the narrower dtype the ULP distance is counted in: the values are of that dtype,
	// widened (bf16 logits stored as float32), so its patterns are the top bits of Format's.
	ULPIn *fp.Format
	Where string // "pos 17 · feature 203"
	Rows  []Value
}

// Rows is the number of lines View draws for e (without the final summary when there is only one row).
func Rows(e Element) int { return 2 + 2*len(e.Rows) }

// View draws e in w cells.
func View(st theme.Styles, e Element, w int) string {
	f := e.Format
	const labelW, decW = 12, 14
	hexW := f.Size*2 + 4
	var lines []string
	head := st.Faint.Render(fmt.Sprintf("%-*s%-*s%-*s", labelW, "", decW, "value", hexW, "hex"))
	if f.Kind != fp.KindFloat {
		head += st.Faint.Render("bits")
	} else {
		head += st.Sign.Render("s") + " " + st.Exp.Render(fmt.Sprintf("%-*s", int(f.ExpBits)+1, "exp")) +
			st.Mant.Render("mantissa")
	}
	head += st.Faint.Render("   " + f.Name)
	lines = append(lines, head)
	for _, v := range e.Rows {
		var ref *Value
		if v.Ref >= 0 && v.Ref < len(e.Rows) {
			ref = &e.Rows[v.Ref]
		}
		sign, exp, mant := f.Fields(v.Bits)
		var rs, re, rm string
		if ref != nil {
			rs, re, rm = f.Fields(ref.Bits)
		}
		line := st.Muted.Render(theme.Fit(v.Label, labelW)) + st.Text.Render(theme.Fit(f.Short(v.Bits), decW)) +
			st.Muted.Render(theme.Fit("0x"+strings.ToUpper(f.Hex(v.Bits)[2:]), hexW)) +
			field(st, st.Sign, sign, rs) + " " + field(st, st.Exp, exp, re) + " " + field(st, st.Mant, mant, rm)
		if v.Note != "" {
			line += "  " + v.Note
		}
		lines = append(lines, line)
		// the caret line: ^ under each differing bit
		if ref != nil && ref.Bits != v.Bits {
			carets := strings.Repeat(" ", labelW+decW+hexW) + carets(sign, rs) + " " + carets(exp, re) + " " + carets(mant, rm)
			lines = append(lines, st.Bad.Render(strings.TrimRight(carets, " ")))
		}
	}
	lines = append(lines, summary(st, e))
	return strings.Join(lines, "\n")
}

func field(st theme.Styles, base lipgloss.Style, bits, ref string) string {
	if ref == "" || bits == ref {
		return base.Render(bits)
	}
	var b strings.Builder
	for i := range bits {
		if bits[i] != ref[i] {
			b.WriteString(st.BitDiff.Render(bits[i : i+1]))
		} else {
			b.WriteString(base.Render(bits[i : i+1]))
		}
	}
	return b.String()
}

func carets(bits, ref string) string {
	var b strings.Builder
	for i := range bits {
		if ref != "" && bits[i] != ref[i] {
			b.WriteByte('^')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// summary compares the first two rows: ULP distance, absolute and relative error, and differing bits; for
// integers (tokens, ids), whether the two values differ and what they are: their distance means nothing.
func summary(st theme.Styles, e Element) string {
	where := st.Muted.Render(e.Where)
	if len(e.Rows) < 2 {
		return where
	}
	f := e.Format
	a, b := e.Rows[0].Bits, e.Rows[1].Bits
	u, unit := f.ULP(a, b), "ULP"
	if n := e.ULPIn; n != nil && !f.IsInt() {
		shift := uint(8 * (f.Size - n.Size))
		u, unit = n.ULP(a>>shift, b>>shift), n.Name+" ULP"
	}
	switch {
	case u == 0 && f.IsInt():
		return st.Good.Render("equal values") + st.Text.Render(fmt.Sprintf("  %s", f.Decimal(a))) + st.Muted.Render("  ·  ") + where
	case u == 0:
		return st.Good.Render("bitwise equal") + st.Muted.Render("  ·  ") + where
	case f.IsInt():
		return st.Bad.Bold(true).Render("values differ") + st.Text.Render(fmt.Sprintf("  %s ≠ %s", f.Decimal(a), f.Decimal(b))) +
			st.Muted.Render("  ·  ") + where
	}
	abs := math.Abs(f.Value(a) - f.Value(b))
	diff := 0
	for x := a ^ b; x != 0; x &= x - 1 {
		diff++
	}
	return st.Bad.Bold(true).Render(fmt.Sprintf("%d %s", u, unit)) + st.Text.Render(fmt.Sprintf("  rel %.3g  abs %.3g  %d bit%s differ",
		f.RelErr(a, b), abs, diff, plural(diff))) + st.Muted.Render("  ·  ") + where
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
