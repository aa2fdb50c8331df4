package replay

import (
	"errors"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/theme"
)

func TestView(t *testing.T) {
	st := theme.Default()
	sides := [2]string{"trainer", "sampler"}
	r := &view.Replay{Backend: "CPU", InputsIdentical: true, Local: true,
		Verdict: "local: inputs identical; the engine reproduces trainer, not sampler",
		FromA:   view.ReplaySide{Reproduces: true}, FromB: view.ReplaySide{Mismatched: 12, MaxULP: 3}}
	out := ansi.Strip(View(st, Status{Result: r}, sides, false, 40, Height(st, Status{Result: r}, sides, false, 40)))
	for _, want := range []string{"LOCAL", "CPU", "from trainer", "✓ reproduced", "✗ 12 differ, max 3 ulp", "identical"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if Height(st, Status{Result: r}, sides, false, 40) != strings.Count(out, "\n")+1 {
		t.Error("Height disagrees with View")
	}
	// an integer op (sampled tokens) counts the values that differ, without ULPs
	if out := ansi.Strip(View(st, Status{Result: r}, sides, true, 40, 9)); !strings.Contains(out, "✗ 12 values differ") || strings.Contains(out, "ulp") {
		t.Errorf("integer replay:\n%s", out)
	}
	out = ansi.Strip(View(st, Status{Err: errors.New("replay needs a checkpoint (open with --checkpoint DIR)")}, sides, false, 30, 5))
	if !strings.Contains(out, "replay failed") || !strings.Contains(out, "checkpoint") {
		t.Errorf("error view:\n%s", out)
	}
	if out := ansi.Strip(View(st, Status{Running: true}, sides, false, 40, 3)); !strings.Contains(out, "replaying") {
		t.Errorf("running view:\n%s", out)
	}
}
