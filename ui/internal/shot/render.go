// Package shot renders TUI frames (ANSI text) to PNG images with Go Mono, through a terminal emulator
// (charmbracelet/x/vt): `make screenshots` runs the ui package's TestScreenshots, which drives the root model
// and saves each screen with it.
package shot

import (
	"image"
	"image/color"
	"image/draw"
	"strings"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/vt"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/gomonobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Terminal colours of the rendered screenshots.
var (
	defaultFg = color.RGBA{0xD8, 0xDE, 0xE9, 0xFF}
	defaultBg = color.RGBA{0x16, 0x18, 0x21, 0xFF}
)

// substitutes for glyphs Go Mono lacks; block elements and box drawing are drawn as shapes instead.
var substitutes = map[rune]rune{'✓': '√', '✗': '×', '∅': 'Ø', '▶': '►', '⇄': '↔', '⟳': '●', '▸': '›', '◂': '‹'}

// Renderer rasterises ANSI screens with Go Mono.
type Renderer struct {
	regular, bold font.Face
	cw, ch, asc   int
}

// NewRenderer loads the fonts at size pt.
func NewRenderer(pt float64) (*Renderer, error) {
	load := func(ttf []byte) (font.Face, error) {
		f, err := opentype.Parse(ttf)
		if err != nil {
			return nil, err
		}
		return opentype.NewFace(f, &opentype.FaceOptions{Size: pt, DPI: 72, Hinting: font.HintingFull})
	}
	r := &Renderer{}
	var err error
	if r.regular, err = load(gomono.TTF); err != nil {
		return nil, err
	}
	if r.bold, err = load(gomonobold.TTF); err != nil {
		return nil, err
	}
	adv, _ := r.regular.GlyphAdvance('M')
	m := r.regular.Metrics()
	r.cw = adv.Ceil()
	r.ch = m.Height.Ceil() + 3
	r.asc = m.Ascent.Ceil() + 1
	return r, nil
}

// Render draws screen (lines separated by \n, styled with SGR sequences) on a cols×rows terminal.
func (r *Renderer) Render(screen string, cols, rows int) *image.RGBA {
	em := vt.NewEmulator(cols, rows)
	em.WriteString(strings.ReplaceAll(screen, "\n", "\r\n"))
	const pad = 12
	img := image.NewRGBA(image.Rect(0, 0, cols*r.cw+2*pad, rows*r.ch+2*pad))
	draw.Draw(img, img.Bounds(), image.NewUniform(defaultBg), image.Point{}, draw.Src)
	for y := 0; y < rows; y++ {
		for x := 0; x < cols; x++ {
			c := em.CellAt(x, y)
			if c == nil || c.Width == 0 {
				continue
			}
			fg, bg := color.Color(defaultFg), color.Color(defaultBg)
			if c.Style.Fg != nil {
				fg = c.Style.Fg
			}
			if c.Style.Bg != nil {
				bg = c.Style.Bg
			}
			if c.Style.Attrs&uv.AttrReverse != 0 {
				fg, bg = bg, fg
			}
			if c.Style.Attrs&uv.AttrFaint != 0 {
				fg = blend(fg, bg, 0.5)
			}
			cell := image.Rect(pad+x*r.cw, pad+y*r.ch, pad+(x+c.Width)*r.cw, pad+(y+1)*r.ch)
			draw.Draw(img, cell, image.NewUniform(bg), image.Point{}, draw.Src)
			rs := []rune(c.Content)
			if len(rs) == 0 || rs[0] == ' ' {
				continue
			}
			if r.shape(img, cell, rs[0], fg, bg) {
				continue
			}
			ch := rs[0]
			if s, ok := substitutes[ch]; ok {
				ch = s
			}
			face := r.regular
			if c.Style.Attrs&uv.AttrBold != 0 {
				face = r.bold
			}
			d := font.Drawer{Dst: img, Src: image.NewUniform(fg), Face: face,
				Dot: fixed.P(cell.Min.X, cell.Min.Y+r.asc)}
			d.DrawString(string(ch))
		}
	}
	return img
}

func blend(a, b color.Color, t float64) color.Color {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	mix := func(x, y uint32) uint8 { return uint8((float64(x)*(1-t) + float64(y)*t) / 257) }
	return color.RGBA{mix(ar, br), mix(ag, bg), mix(ab, bb), 0xFF}
}

// shape draws block elements and box-drawing lines as exact rectangles, so they tile without gaps.
func (r *Renderer) shape(img *image.RGBA, c image.Rectangle, ch rune, fg, bg color.Color) bool {
	fill := func(x0, y0, x1, y1 int, col color.Color) {
		draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Src)
	}
	w, h := c.Dx(), c.Dy()
	mx, my := c.Min.X+w/2, c.Min.Y+h/2
	const t = 1 // line thickness
	switch {
	case ch == '▀':
		fill(c.Min.X, c.Min.Y, c.Max.X, my, fg)
	case ch == '▄':
		fill(c.Min.X, my, c.Max.X, c.Max.Y, fg)
	case ch == '█':
		fill(c.Min.X, c.Min.Y, c.Max.X, c.Max.Y, fg)
	case ch == '▌':
		fill(c.Min.X, c.Min.Y, mx, c.Max.Y, fg)
	case ch >= '▁' && ch <= '▇':
		n := int(ch-'▁') + 1
		fill(c.Min.X, c.Max.Y-h*n/8, c.Max.X, c.Max.Y, fg)
	case ch == '░' || ch == '▒' || ch == '▓':
		fill(c.Min.X, c.Min.Y, c.Max.X, c.Max.Y, blend(bg, fg, map[rune]float64{'░': 0.25, '▒': 0.5, '▓': 0.75}[ch]))
	case ch == '─':
		fill(c.Min.X, my, c.Max.X, my+t, fg)
	case ch == '│':
		fill(mx, c.Min.Y, mx+t, c.Max.Y, fg)
	case ch == '┌':
		fill(mx, my, c.Max.X, my+t, fg)
		fill(mx, my, mx+t, c.Max.Y, fg)
	case ch == '┐':
		fill(c.Min.X, my, mx+t, my+t, fg)
		fill(mx, my, mx+t, c.Max.Y, fg)
	case ch == '└':
		fill(mx, my, c.Max.X, my+t, fg)
		fill(mx, c.Min.Y, mx+t, my+t, fg)
	case ch == '┘':
		fill(c.Min.X, my, mx+t, my+t, fg)
		fill(mx, c.Min.Y, mx+t, my+t, fg)
	default:
		return false
	}
	return true
}
