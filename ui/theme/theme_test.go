package theme

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

func TestFitAndPanel(t *testing.T) {
	st := Default()
	if got := Fit(st.Bad.Render("abcdef"), 4); ansi.StringWidth(got) != 4 || !strings.HasSuffix(ansi.Strip(got), "…") {
		t.Errorf("Fit truncates styled text with an ellipsis: %q", ansi.Strip(got))
	}
	if got := Fit("ab", 5); got != "ab   " {
		t.Errorf("Fit pads: %q", got)
	}
	p := st.Panel("a very long title that does not fit", "x\ny\nz\nw", 12, 4, true)
	lines := strings.Split(p, "\n")
	if len(lines) != 4 {
		t.Fatalf("panel has %d lines", len(lines))
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w != 12 {
			t.Errorf("panel line %d is %d wide: %q", i, w, ansi.Strip(l))
		}
	}
	if !strings.HasPrefix(ansi.Strip(lines[0]), "┌─") || ansi.Strip(lines[2]) != "│y         │" {
		t.Errorf("panel:\n%s", ansi.Strip(p))
	}
	if got := JoinColumns("ab\ncd", "X"); got != "abX\ncd " {
		t.Errorf("JoinColumns pads short blocks: %q", got)
	}
}

func TestLevels(t *testing.T) {
	prev := 0
	for b := uint8(0); b <= 64; b++ {
		l := Level(b)
		if l < prev || l > Levels {
			t.Fatalf("Level(%d) = %d after %d", b, l, prev)
		}
		prev = l
	}
	if Level(0) != 0 || Level(1) != 1 || Level(13) != Levels || len(Default().Heat) != Levels+1 {
		t.Error("level 0 is equal, 1 is one ULP, ≥4096 ULP is the top level")
	}
}

func TestValueLevel(t *testing.T) {
	if ValueLevel(0, true) != 0 || ValueLevel(1, true) != IntLevel || ValueLevel(7, true) != IntLevel {
		t.Error("an integer element is equal (level 0) or differs (IntLevel), whatever the size of the difference")
	}
	for b := uint8(0); b <= 64; b++ {
		if ValueLevel(b, false) != Level(b) {
			t.Fatalf("ValueLevel(%d, float) = %d, Level = %d", b, ValueLevel(b, false), Level(b))
		}
	}
}
