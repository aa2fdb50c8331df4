// Package replay draws the verdict of re-executing an op from each side's captured inputs: which side the
// deterministic engine reproduces, and whether the divergence starts at this op or comes from upstream.
package replay

import (
	"fmt"
	"strings"
	"time"

	"bitalign/session/view"
	"bitalign/ui/oplist"
	"bitalign/ui/theme"
)

// Status is what the panel shows for the selected op.
type Status struct {
	Running bool
	Backend string // known while running when the source says so
	Since   time.Time
	Result  *view.Replay
	Err     error
}

// View draws s in w×h. integer: the op's output is integers (tokens, ids), whose differences are counted
// values, not ULPs.
func View(st theme.Styles, s Status, sides [2]string, integer bool, w, h int) string {
	return strings.Join(theme.FitLines(strings.Join(body(st, s, sides, integer, w), "\n"), w, h), "\n")
}

// Height is the number of lines View needs for s at width w.
func Height(st theme.Styles, s Status, sides [2]string, integer bool, w int) int {
	return len(body(st, s, sides, integer, w))
}

func body(st theme.Styles, s Status, sides [2]string, integer bool, w int) []string {
	var lines []string
	switch {
	case s.Running:
		lines = append(lines, st.Info.Render("replaying…"), st.Muted.Render("the engine re-executes this op from"),
			st.Muted.Render("each side's captured inputs"))
	case s.Err != nil:
		lines = append(lines, st.StatusErr.Render("replay failed"))
		lines = append(lines, strings.Split(theme.Wrap(s.Err.Error(), w), "\n")...)
	case s.Result == nil:
		lines = append(lines, st.Muted.Render("press r to replay this op"), st.Faint.Render("with the deterministic engine"))
	default:
		r := s.Result
		verdict, rest, _ := strings.Cut(r.Verdict, ":")
		vs := st.Good
		if r.Local {
			vs = st.Bad
		} else if !r.InputsIdentical {
			vs = st.Warn
		}
		lines = append(lines, vs.Bold(true).Render(strings.ToUpper(verdict))+st.Muted.Render(fmt.Sprintf("  %s · %s", r.Backend,
			elapsed(r.Elapsed))))
		lines = append(lines, strings.Split(theme.Wrap(strings.TrimSpace(rest), w), "\n")...)
		in := st.Good.Render("identical")
		if !r.InputsIdentical {
			in = st.Warn.Render("differ")
		}
		lines = append(lines, st.Muted.Render(theme.Fit("inputs", 14))+in)
		lines = append(lines, side(st, sides[0], r.FromA, integer), side(st, sides[1], r.FromB, integer))
	}
	return lines
}

func side(st theme.Styles, name string, s view.ReplaySide, integer bool) string {
	label := st.Muted.Render(theme.Fit("from "+name, 14))
	if s.Err != "" {
		return label + st.Warn.Render("not replayed: "+s.Err)
	}
	if s.Reproduces {
		return label + st.Good.Render("✓ reproduced")
	}
	if integer {
		return label + st.Bad.Render("✗ "+oplist.Differ(s.Mismatched))
	}
	return label + st.Bad.Render(fmt.Sprintf("✗ %d differ, max %s", s.Mismatched, oplist.FormatULP(s.MaxULP)))
}

// wrap breaks s into lines of at most w cells at spaces.
func elapsed(d time.Duration) string {
	if d < time.Millisecond {
		return "<1 ms"
	}
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(10 * time.Millisecond).String()
}
