package session

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// maxMissingListed bounds the missing tensors the text and Markdown reports list (JSON lists all).
const maxMissingListed = 20

// Verdict is the one-line summary of a report, the same in every format. A replay of some ops (replay --ops)
// says which: the replay holds nothing else.
func (r *Report) Verdict() string {
	v := r.verdict()
	if r.Command == "replay" && r.Compared > 0 && len(r.Filter) > 0 {
		v += " (ops matching " + strings.Join(r.Filter, ", ") + ")"
	}
	return v
}

func (r *Report) verdict() string {
	if r.Compared == 0 {
		v := "nothing compared"
		var parts []string
		if n := countStatus(r, StatusShapeMismatch); n > 0 {
			parts = append(parts, plural(n, "op")+" with mismatched shapes")
		}
		if len(r.Missing) > 0 {
			parts = append(parts, plural(len(r.Missing), "tensor")+" on one side only")
		}
		if len(parts) > 0 {
			v += ": " + strings.Join(parts, ", ")
		}
		if len(r.Filter) > 0 {
			v += " (ops matching " + strings.Join(r.Filter, ", ") + ")"
		}
		return v
	}
	if r.TablePair() {
		prefix := ""
		if c := r.Check; c != nil && !r.Identical {
			prefix = map[bool]string{true: "within tolerance (" + c.bounds() + "); ", false: "outside tolerance (" + c.failed() + "); "}[c.Within]
		}
		return prefix + r.RL.Headline()
	}
	if r.Identical {
		if n := len(r.Missing) - len(r.MissingProblems()); n > 0 {
			return "bitwise identical (" + plural(n, "missing tensor") + " ignored)"
		}
		return "bitwise identical"
	}
	prefix := ""
	if c := r.Check; c != nil {
		if c.Within {
			prefix = "within tolerance (" + c.bounds() + "); "
		} else {
			prefix = "outside tolerance (" + c.failed() + "); "
		}
	}
	if f := r.First; f != nil {
		if fl := f.Routing; fl != nil && f.Op == fl.Op {
			return prefix + "first divergence: " + fl.String()
		}
		v := prefix + fmt.Sprintf("first divergence: %s, %s, %s", f.Op, where(f.At), distance(&r.Ops[r.FindOp(f.Op, f.Role)]))
		if fl := f.Routing; fl != nil {
			if fl.Kind == RouteSet {
				v += "; routing flip: " + fl.String()
			} else {
				v += "; routing: " + fl.String()
			}
		}
		return v
	}
	var parts []string
	if n := countStatus(r, StatusShapeMismatch); n > 0 {
		parts = append(parts, plural(n, "op")+" with mismatched shapes")
	}
	if n := len(r.MissingProblems()); n > 0 {
		parts = append(parts, plural(n, "missing tensor"))
	}
	return prefix + "not comparable everywhere: " + strings.Join(parts, ", ") + " (compared elements identical)"
}

// distance sums up a divergent op's differences: "max 8 ULP, max |a−b|/RMS 0.0312", "max 3 bf16 ULP, ...",
// "1 NaN against a number", "3 values differ" (integers).
func distance(o *OpStat) string {
	if o.Located {
		verb := " differ"
		if o.Mismatched == 1 {
			verb = " differs"
		}
		return plural(int(o.Mismatched), "row") + verb + " (located by fingerprints: no values)"
	}
	if o.ULPDType == "" {
		return differing(o.Mismatched)
	}
	var parts []string
	if o.Mismatched > o.NaNNumber {
		parts = append(parts, "max "+strconv.FormatUint(o.MaxULP, 10)+" "+ulpUnit(o))
	}
	if o.NaNNumber > 0 {
		parts = append(parts, strconv.FormatInt(o.NaNNumber, 10)+" NaN against a number")
	}
	if o.MaxRMSRel > 0 {
		parts = append(parts, "max |a−b|/RMS "+sci(o.MaxRMSRel))
	}
	return strings.Join(parts, ", ")
}

// ulpUnit is "ULP", or "bf16 ULP" when an op's ULPs are not its dtype's.
func ulpUnit(o *OpStat) string {
	if o.ULPDType != o.DType {
		return o.ULPDType + " ULP"
	}
	return "ULP"
}

// bounds names a tolerance's bounds: "max ULP ≤ 4, |a−b|/RMS ≤ 0.001".
func (t Tolerance) bounds() string {
	var parts []string
	if t.HasULP {
		parts = append(parts, "max ULP ≤ "+strconv.FormatUint(t.MaxULP, 10))
	}
	if t.HasRel {
		parts = append(parts, "|a−b|/RMS ≤ "+strconv.FormatFloat(t.MaxRel, 'g', -1, 64))
	}
	if len(parts) == 0 {
		return "no bound set"
	}
	return strings.Join(parts, ", ")
}

// failed names what broke a check: the bounds that did not hold, else the first problem.
func (c *Check) failed() string {
	var parts []string
	if c.HasULP && !c.ULPHeld {
		parts = append(parts, "max ULP ≤ "+strconv.FormatUint(c.MaxULP, 10)+" failed")
	}
	if c.HasRel && !c.RelHeld {
		parts = append(parts, "|a−b|/RMS ≤ "+strconv.FormatFloat(c.MaxRel, 'g', -1, 64)+" failed")
	}
	if len(c.Problems) > 0 {
		parts = append(parts, c.Problems[0])
		if n := len(c.Problems) - 1; n > 0 {
			parts[len(parts)-1] += fmt.Sprintf(" and %d more", n)
		}
	}
	if len(parts) == 0 {
		return "no bound set"
	}
	return strings.Join(parts, "; ")
}

// checkLines are the tolerance section of the text and Markdown reports: one line per bound and problem.
func checkLines(c *Check) []string {
	state := func(held bool) string {
		if held {
			return "held"
		}
		return "failed"
	}
	var out []string
	if c.HasULP {
		s := fmt.Sprintf("max ULP ≤ %d: %s", c.MaxULP, state(c.ULPHeld))
		if c.WorstULPOp != "" {
			s += fmt.Sprintf(" (largest %d ULP, %s)", c.WorstULP, c.WorstULPOp)
		}
		if c.NaNOp != "" {
			s += "; NaN against a number in " + c.NaNOp
		}
		out = append(out, s)
	}
	if c.HasRel {
		s := fmt.Sprintf("|a−b|/RMS ≤ %s: %s", strconv.FormatFloat(c.MaxRel, 'g', -1, 64), state(c.RelHeld))
		if c.WorstRelOp != "" {
			s += fmt.Sprintf(" (largest %s, %s)", sci(c.WorstRel), c.WorstRelOp)
		}
		if c.NaNOp != "" {
			s += "; NaN against a number in " + c.NaNOp
		}
		if c.InfOp != "" {
			s += "; ±Inf against another value in " + c.InfOp
		}
		out = append(out, s)
	}
	for _, p := range c.Problems {
		out = append(out, "problem: "+p)
	}
	return out
}

// firstDistance is the first divergence's distance line: "8 ULP (numeric)", "3 bf16 ULP (numeric; ...)".
func firstDistance(f *Divergence) string {
	if f.Located {
		return "the row's fingerprints differ (its values were not recorded: no ULP distance)"
	}
	if f.ULPDType == "" {
		return "integer values differ (no ULP distance)"
	}
	s := ulpString(f.ULP) + " ULP"
	if f.ULPDType != f.DType {
		s = ulpString(f.ULP) + " " + f.ULPDType + " ULP"
	}
	s += " (" + f.Class.String()
	if f.ULPDType != f.DType {
		s += "; every " + f.DType + " value of the op is a " + f.ULPDType + " value"
	}
	s += ")"
	if f.RMSRel > 0 {
		s += ", |a−b|/RMS " + sci(f.RMSRel)
	}
	return s
}

// narrowNote names the ops whose ULPs are counted in another dtype than theirs, or "".
func narrowNote(r *Report) string {
	var names []string
	for i := range r.Ops {
		if o := &r.Ops[i]; o.ULPDType != "" && o.ULPDType != o.DType && o.Status == StatusDivergent {
			names = append(names, o.Op+" ["+o.Role+"]")
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "ULPs in bf16 (every f32 value on both sides is a bf16 value): " + strings.Join(names, ", ")
}

// missingNote is the line that counts what --ignore-missing ignored, or "".
func missingNote(r *Report) string {
	if !r.IgnoreMissing {
		return ""
	}
	n := 0
	var pos int64
	for _, m := range r.Missing {
		if m.Reason == "" {
			n++
			pos += max(m.NTok, 1)
		}
	}
	if n == 0 {
		return ""
	}
	ops := countStatus(r, StatusMissingA) + countStatus(r, StatusMissingB)
	return fmt.Sprintf("missing ignored: %s on one side only (%s, %s)", plural(n, "tensor"),
		plural(ops, "whole op"), plural(int(pos), "position"))
}

// listed reports whether an op gets a row in the text, Markdown and HTML tables: an op one side lacks does
// not when missing tensors are ignored (missingNote counts it).
func listed(r *Report, o *OpStat) bool {
	return !r.IgnoreMissing || o.Status != StatusMissingA && o.Status != StatusMissingB
}

// captureRow is one row of the Markdown and HTML tables of the two captures.
type captureRow struct {
	Name, A, B string
	Code       bool // set in code type (paths)
}

// captureRows are the rows of the captures' table; a row neither capture's metadata fills (batch size 0, no
// kernel profile, no architecture) is left out, and a side without it shows "—".
func captureRows(r *Report) []captureRow {
	rows := []captureRow{{"side", r.A.Side, r.B.Side, false}, {"path", r.A.Path, r.B.Path, true},
		{"tensors", strconv.Itoa(r.A.Tensors), strconv.Itoa(r.B.Tensors), false},
		{"size", byteSize(r.A.Bytes), byteSize(r.B.Bytes), false},
		{"tp / pp / dp", fmt.Sprintf("%d / %d / %d", max(r.A.TP, 1), max(r.A.PP, 1), max(r.A.DP, 1)),
			fmt.Sprintf("%d / %d / %d", max(r.B.TP, 1), max(r.B.PP, 1), max(r.B.DP, 1)), false}}
	opt := func(name, a, b string) {
		if a != "" || b != "" {
			rows = append(rows, captureRow{name, cmp.Or(a, "—"), cmp.Or(b, "—"), false})
		}
	}
	batch := func(n int) string {
		if n <= 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	opt("architecture", r.A.Architecture, r.B.Architecture)
	opt("kernel profile", r.A.KernelProfile, r.B.KernelProfile)
	opt("batch", batch(r.A.BatchSize), batch(r.B.BatchSize))
	return rows
}

// upper capitalises a line's first letter, for a sentence.
func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// summary is the line with the totals.
func summary(r *Report) string {
	s := fmt.Sprintf("compared %d elements in %s; %d mismatched in %s", r.Compared, plural(len(r.Ops), "op"),
		r.Mismatched, plural(len(r.Divergent()), "op"))
	if r.Located > 0 {
		s += " (an op compared through fingerprints counts token rows)"
	}
	if n := len(r.MissingProblems()); n > 0 || !r.IgnoreMissing {
		s += "; " + plural(n, "missing tensor")
	}
	return s
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
	if c.Element == nil { // a row located by fingerprints
		return fmt.Sprintf("step %d seq %d pos %d (the whole row)", c.Step, c.Seq, c.Pos)
	}
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

// sideLine describes one capture; fields its metadata does not have (batch size 0, no kernel profile, no
// architecture) are left out.
func sideLine(name string, c CaptureInfo) string {
	if c.Table != "" {
		return strings.TrimRight(fmt.Sprintf("%s: %s %s — %s, %s", name, c.Side, c.Path, c.Table, byteSize(c.Bytes)), " ")
	}
	s := fmt.Sprintf("%s: %s %s — %d tensors, %s", name, c.Side, c.Path, c.Tensors, byteSize(c.Bytes))
	s += fmt.Sprintf(", tp %d pp %d dp %d", max(c.TP, 1), max(c.PP, 1), max(c.DP, 1))
	if c.BatchSize > 0 {
		s += fmt.Sprintf(", batch %d", c.BatchSize)
	}
	if c.KernelProfile != "" {
		s += ", profile " + c.KernelProfile
	}
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
	maxULP, maxAbs, maxRel, rmsRel := "", "", "", ""
	if o.Mismatched > 0 && o.ULPDType != "" { // integers: the count of differing values only
		maxULP = strconv.FormatUint(o.MaxULP, 10)
		if o.ULPDType != o.DType {
			maxULP += " " + o.ULPDType
		}
		if o.NaNNumber > 0 {
			maxULP += " +NaN"
		}
		maxAbs, maxRel, rmsRel = sci(o.MaxAbs), sci(o.MaxRel), sci(o.MaxRMSRel)
	}
	return []string{strconv.Itoa(int(o.Index)), o.Op, o.Role, status, o.DType, strconv.FormatInt(o.Elements, 10), mism,
		maxULP, maxAt, rmsRel, maxAbs, maxRel, pairStr(o.NaNA, o.NaNB), pairStr(o.InfA, o.InfB)}
}

// opHeader heads the per-op table. "max ULP" is in the op's ULP dtype (marked "bf16" when it is not the op's
// dtype); "max |a−b|/RMS" is OpStat.MaxRMSRel, "max rel" |a−b|/max(|a|,|b|).
var opHeader = []string{"#", "op", "role", "status", "dtype", "elements", "mismatched", "max ULP", "max at (step seq pos elem)",
	"max |a−b|/RMS", "max abs", "max rel", "NaN A/B", "Inf A/B"}

// writeMissing lists the missing tensors, one a line after prefix and through esc: at most maxMissingListed,
// then how many more.
func writeMissing(b io.Writer, miss []MissingTensor, prefix string, esc func(string) string) {
	for i, m := range miss {
		if i == maxMissingListed {
			fmt.Fprintf(b, "%s... and %d more (see the JSON report)\n", prefix, len(miss)-i)
			return
		}
		fmt.Fprintf(b, "%s%s\n", prefix, esc(missingLine(m)))
	}
}

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

// WriteText writes a terminal summary: verdict, both captures, the first divergence, the tolerance check, the
// per-op table and the missing tensors.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\n", r.Title(), r.Verdict())
	fmt.Fprintln(&b, sideLine("A", r.A))
	fmt.Fprintln(&b, sideLine("B", r.B))
	if r.TablePair() {
		return writeTablePairText(w, &b, r)
	}
	if len(r.Filter) > 0 {
		fmt.Fprintf(&b, "ops matching %s\n", strings.Join(r.Filter, ", "))
	}
	fmt.Fprintln(&b, summary(r))
	if n := missingNote(r); n != "" {
		fmt.Fprintln(&b, n)
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(&b, "warning: "+w)
	}
	for _, l := range locatedLines(r) {
		fmt.Fprintln(&b, l)
	}
	if f := r.First; f != nil {
		fmt.Fprintf(&b, "\nFirst divergence: %s [%s] (index %d, %s)\n", f.Op, f.Role, f.Index, f.DType)
		fmt.Fprintf(&b, "  at   %s\n", where(f.At))
		if !f.Located {
			fmt.Fprintf(&b, "  A    %s  %s\n", f.A.Hex, f.A.Decimal)
			fmt.Fprintf(&b, "  B    %s  %s\n", f.B.Hex, f.B.Decimal)
		}
		fmt.Fprintf(&b, "  diff %s\n", firstDistance(f))
		if f.Cause != CauseNone {
			fmt.Fprintf(&b, "  cause %s (%s)\n", f.Cause, f.Detail)
		}
		if f.Routing != nil {
			fmt.Fprintf(&b, "  routing %s\n", f.Routing)
		}
	}
	if rt := r.Routing; rt != nil {
		fmt.Fprintf(&b, "\nRouting (%s):\n", rt.Summary())
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  "+strings.Join(routingHeader, "\t"))
		for _, row := range routingRows(rt) {
			fmt.Fprintln(tw, "  "+strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, l := range flipLines(rt) {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	if c := r.Check; c != nil {
		fmt.Fprintf(&b, "\nTolerance: %s\n", map[bool]string{true: "within", false: "outside"}[c.Within])
		for _, l := range checkLines(c) {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(opHeader, "\t"))
	for i := range r.Ops {
		if listed(r, &r.Ops[i]) {
			fmt.Fprintln(tw, strings.Join(opRow(&r.Ops[i]), "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := narrowNote(r); n != "" {
		fmt.Fprintln(&b, n)
	}
	for i := range r.Ops {
		if o := &r.Ops[i]; o.Detail != "" {
			fmt.Fprintf(&b, "%s [%s]: %s\n", o.Op, o.Role, o.Detail)
		}
	}
	if miss := r.MissingProblems(); len(miss) > 0 {
		fmt.Fprintf(&b, "\nMissing (%d):\n", len(miss))
		writeMissing(&b, miss, "  ", func(s string) string { return s })
	}
	if r.RL != nil {
		if err := writeRLText(&b, r.RL); err != nil {
			return err
		}
	}
	return writeTrimmed(w, &b)
}

// writeTablePairText is the text report of a logprob-only pair: the logprob section in place of the ops.
func writeTablePairText(w io.Writer, b *strings.Builder, r *Report) error {
	for _, warn := range r.Warnings {
		fmt.Fprintln(b, "warning: "+warn)
	}
	if c := r.Check; c != nil {
		fmt.Fprintf(b, "\nTolerance: %s\n", map[bool]string{true: "within", false: "outside"}[c.Within])
		for _, l := range checkLines(c) {
			fmt.Fprintf(b, "  %s\n", l)
		}
	}
	if err := writeRLText(b, r.RL); err != nil {
		return err
	}
	return writeTrimmed(w, b)
}

// writeTrimmed writes b's lines without trailing blanks.
func writeTrimmed(w io.Writer, b *strings.Builder) error {
	lines := strings.Split(b.String(), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}
