package session

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// maxMissingListed bounds the missing tensors the text and Markdown reports list (JSON lists all).
const maxMissingListed = 20

// verdict is the one-line summary of a report.
func verdict(r *Report) string {
	if r.Identical {
		return "bitwise identical"
	}
	if f := r.First; f != nil {
		return fmt.Sprintf("first divergence: %s, %s, max %s ULP", f.Op, where(f.At), ulpString(r.Ops[r.FindOp(f.Op, f.Role)].MaxULP))
	}
	var parts []string
	if n := countStatus(r, StatusShapeMismatch); n > 0 {
		parts = append(parts, plural(n, "op")+" with mismatched shapes")
	}
	if len(r.Missing) > 0 {
		parts = append(parts, plural(len(r.Missing), "missing tensor"))
	}
	return "not comparable everywhere: " + strings.Join(parts, ", ") + " (compared elements identical)"
}

func countStatus(r *Report, s Status) int {
	n := 0
	for i := range r.Ops {
		if r.Ops[i].Status == s {
			n++
		}
	}
	return n
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func where(c Coord) string {
	return fmt.Sprintf("step %d seq %d pos %d element %s", c.Step, c.Seq, c.Pos, elemString(c.Element))
}

func elemString(e []int64) string {
	s := make([]string, len(e))
	for i, v := range e {
		s[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func ulpString(u uint64) string {
	if u == ULPNaNNumber {
		return "NaN"
	}
	return strconv.FormatUint(u, 10)
}

func sci(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func pct(n, d int64) string {
	if d == 0 || n == 0 {
		return ""
	}
	p := 100 * float64(n) / float64(d)
	if p < 0.01 {
		return "<0.01%"
	}
	return strconv.FormatFloat(p, 'f', 2, 64) + "%"
}

func sideLine(name string, c CaptureInfo) string {
	s := fmt.Sprintf("%s: %s %s — %d tensors, %s", name, c.Side, c.Path, c.Tensors, byteSize(c.Bytes))
	s += fmt.Sprintf(", tp %d pp %d dp %d, batch %d, profile %s", max(c.TP, 1), max(c.PP, 1), max(c.DP, 1), c.BatchSize, c.KernelProfile)
	if c.Architecture != "" {
		s += ", " + c.Architecture
	}
	return s
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

func pairStr(a, b int64) string {
	if a == 0 && b == 0 {
		return ""
	}
	return strconv.FormatInt(a, 10) + "/" + strconv.FormatInt(b, 10)
}

// opRow is one op's cells in the text and Markdown tables.
func opRow(o *OpStat) []string {
	status := string(o.Status)
	if o.Cause != CauseNone {
		status += " (" + string(o.Cause) + ")"
	}
	maxAt := ""
	if o.MaxAt != nil {
		maxAt = fmt.Sprintf("s%d q%d p%d %s", o.MaxAt.Step, o.MaxAt.Seq, o.MaxAt.Pos, elemString(o.MaxAt.Element))
	}
	mism := ""
	if o.Mismatched > 0 {
		mism = strconv.FormatInt(o.Mismatched, 10) + " (" + pct(o.Mismatched, o.Elements) + ")"
	}
	maxULP, maxAbs, maxRel := "", "", ""
	if o.Mismatched > 0 {
		maxULP = strconv.FormatUint(o.MaxULP, 10)
		if o.NaNNumber > 0 {
			maxULP += " +NaN"
		}
		maxAbs, maxRel = sci(o.MaxAbs), sci(o.MaxRel)
	}
	return []string{strconv.Itoa(int(o.Index)), o.Op, o.Role, status, o.DType, strconv.FormatInt(o.Elements, 10), mism,
		maxULP, maxAt, maxAbs, maxRel, pairStr(o.NaNA, o.NaNB), pairStr(o.InfA, o.InfB)}
}

var opHeader = []string{"#", "op", "role", "status", "dtype", "elements", "mismatched", "max ULP", "max at (step seq pos elem)",
	"max abs", "max rel", "NaN A/B", "Inf A/B"}

func missingLine(m MissingTensor) string {
	s := fmt.Sprintf("%s lacks %s [%s] step %d seq %d pos %d", m.MissingIn, m.Op, m.Role, m.Step, m.Seq, m.Pos)
	if m.NTok > 1 {
		s += fmt.Sprintf("..%d", m.Pos+m.NTok-1)
	}
	if m.Reason != "" {
		s += " (" + m.Reason + ")"
	}
	return s
}

// WriteText writes a terminal summary: verdict, both captures, the first divergence, the per-op table and the
// missing tensors.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\n", r.Title(), verdict(r))
	fmt.Fprintln(&b, sideLine("A", r.A))
	fmt.Fprintln(&b, sideLine("B", r.B))
	fmt.Fprintf(&b, "compared %d elements in %s; %d mismatched in %s; %s\n", r.Compared, plural(len(r.Ops), "op"),
		r.Mismatched, plural(len(r.Divergent()), "op"), plural(len(r.Missing), "missing tensor"))
	if f := r.First; f != nil {
		fmt.Fprintf(&b, "\nFirst divergence: %s [%s] (index %d, %s)\n", f.Op, f.Role, f.Index, f.DType)
		fmt.Fprintf(&b, "  at   %s\n", where(f.At))
		fmt.Fprintf(&b, "  A    %s  %s\n", f.A.Hex, f.A.Decimal)
		fmt.Fprintf(&b, "  B    %s  %s\n", f.B.Hex, f.B.Decimal)
		fmt.Fprintf(&b, "  ULP  %s (%s)\n", ulpString(f.ULP), f.Class)
		if f.Cause != CauseNone {
			fmt.Fprintf(&b, "  cause %s (%s)\n", f.Cause, f.Detail)
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(opHeader, "\t"))
	for i := range r.Ops {
		fmt.Fprintln(tw, strings.Join(opRow(&r.Ops[i]), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i := range r.Ops {
		if o := &r.Ops[i]; o.Detail != "" {
			fmt.Fprintf(&b, "%s [%s]: %s\n", o.Op, o.Role, o.Detail)
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "\nMissing (%d):\n", len(r.Missing))
		for i, m := range r.Missing {
			if i == maxMissingListed {
				fmt.Fprintf(&b, "  ... and %d more (see the JSON report)\n", len(r.Missing)-i)
				break
			}
			fmt.Fprintf(&b, "  %s\n", missingLine(m))
		}
	}
	lines := strings.Split(b.String(), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}
