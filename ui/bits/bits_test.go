package bits

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/internal/fp"
	"bitalign/ui/theme"
)

func TestCaretsMarkDifferingBits(t *testing.T) {
	tests := []struct {
		dtype   string
		a, b    uint64
		carets  int
		summary string
	}{
		{"bf16", 0x3F80, 0x3F81, 1, "1 ULP"},
		{"f32", 0x3F800000, 0xBF800000, 1, "ULP"},
		{"f16", 0x3C00, 0x3C03, 2, "3 ULP"},
		{"f8e4m3", 0x38, 0x40, 4, "8 ULP"},
		{"f8e5m2", 0x3C, 0x3C, 0, "bitwise equal"},
		{"i32", 5, 7, 1, "values differ  5 ≠ 7"},
		{"i64", 0xFFFFFFFFFFFFFFFF, 3, 62, "values differ  -1 ≠ 3"},
		{"u8", 200, 200, 0, "equal values  200"},
		{"bool", 0, 1, 1, "values differ  false ≠ true"},
	}
	for _, tt := range tests {
		f, _ := fp.Parse(tt.dtype)
		e := Element{Format: f, Where: "pos 3", Rows: []Value{{Label: "A", Bits: tt.a, Ref: -1}, {Label: "B", Bits: tt.b, Ref: 0}}}
		out := ansi.Strip(View(theme.Default(), e, 100))
		if got := strings.Count(out, "^"); got != tt.carets {
			t.Errorf("%s %#x vs %#x: %d carets, want %d:\n%s", tt.dtype, tt.a, tt.b, got, tt.carets, out)
		}
		if !strings.Contains(out, tt.summary) || !strings.Contains(out, tt.dtype) {
			t.Errorf("%s: want %q in\n%s", tt.dtype, tt.summary, out)
		}
		if f.IsInt() && strings.Contains(strings.ToLower(out), "ulp") {
			t.Errorf("%s: an integer element has no ULPs:\n%s", tt.dtype, out)
		}
	}
}

func TestCaretsAlignWithBits(t *testing.T) {
	f, _ := fp.Parse("bf16")
	e := Element{Format: f, Rows: []Value{{Label: "A", Bits: 0x3F80, Ref: -1}, {Label: "B", Bits: 0x3F81, Ref: 0}}}
	lines := strings.Split(ansi.Strip(View(theme.Default(), e, 100)), "\n")
	b, carets := lines[2], lines[3]
	i := strings.Index(carets, "^")
	if i < 0 || i >= len(b) || b[i] != '1' || !strings.HasSuffix(strings.TrimRight(b, " "), "0000001") {
		t.Errorf("the caret is not under the last mantissa bit:\n%s\n%s", b, carets)
	}
}
