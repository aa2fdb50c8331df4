package shot

import (
	"image/color"
	"testing"

	"charm.land/lipgloss/v2"
)

// TestRenderHalfBlock: a red-over-blue half block fills the cell's top half red and its bottom half blue, and
// box drawing is drawn as lines.
func TestRenderHalfBlock(t *testing.T) {
	r, err := NewRenderer(15)
	if err != nil {
		t.Fatal(err)
	}
	cell := lipgloss.NewStyle().Foreground(lipgloss.Color("#FF0000")).Background(lipgloss.Color("#0000FF")).Render("▀")
	img := r.Render(cell+"─\nab", 4, 2)
	const pad = 12
	top := img.RGBAAt(pad+r.cw/2, pad+2)
	bottom := img.RGBAAt(pad+r.cw/2, pad+r.ch-2)
	if top != (color.RGBA{0xFF, 0, 0, 0xFF}) || bottom != (color.RGBA{0, 0, 0xFF, 0xFF}) {
		t.Errorf("half block: top %v, bottom %v", top, bottom)
	}
	if line := img.RGBAAt(pad+r.cw+1, pad+r.ch/2); line != defaultFg {
		t.Errorf("─ not drawn across the cell's middle: %v", line)
	}
	if b := img.Bounds(); b.Dx() != 4*r.cw+2*pad || b.Dy() != 2*r.ch+2*pad {
		t.Errorf("image is %v", b)
	}
}
