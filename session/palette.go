package session

import (
	"fmt"
	"image/color"
)

// LevelColor is the colour of a comparison level in heatmaps (HTML here; the TUI may use it too): light grey
// for equal, a ramp from pale yellow (1 ULP) through orange and red to dark purple (2^24 ULP and beyond),
// blue for NaN against a number, mid grey for missing.
func LevelColor(level int) color.RGBA {
	switch {
	case level == LevelMissing:
		return color.RGBA{0x9c, 0xa3, 0xaf, 0xff}
	case level <= LevelEqual:
		return color.RGBA{0xf3, 0xf4, 0xf6, 0xff}
	case level >= LevelNaN:
		return color.RGBA{0x25, 0x63, 0xeb, 0xff}
	}
	stops := []struct {
		level   int
		r, g, b uint8
	}{{1, 0xfd, 0xe6, 0x8a}, {4, 0xf5, 0x9e, 0x0b}, {8, 0xdc, 0x26, 0x26}, {16, 0x7f, 0x1d, 0x1d}, {24, 0x3b, 0x07, 0x64}}
	if level >= stops[len(stops)-1].level {
		s := stops[len(stops)-1]
		return color.RGBA{s.r, s.g, s.b, 0xff}
	}
	for i := 1; i < len(stops); i++ {
		lo, hi := stops[i-1], stops[i]
		if level <= hi.level {
			t := float64(level-lo.level) / float64(hi.level-lo.level)
			mix := func(a, b uint8) uint8 { return uint8(float64(a) + t*(float64(b)-float64(a)) + 0.5) }
			return color.RGBA{mix(lo.r, hi.r), mix(lo.g, hi.g), mix(lo.b, hi.b), 0xff}
		}
	}
	return color.RGBA{0, 0, 0, 0xff}
}

// LevelLabel names a level's ULP range: "equal", "1 ULP", "2–3 ULP", "2^10–2^11−1 ULP", "NaN vs number".
func LevelLabel(level int) string {
	switch {
	case level == LevelMissing:
		return "missing"
	case level <= LevelEqual:
		return "equal"
	case level >= LevelNaN:
		return "NaN vs number"
	case level == 1:
		return "1 ULP"
	case level <= 11:
		return fmt.Sprintf("%d–%d ULP", uint64(1)<<(level-1), uint64(1)<<level-1)
	}
	return fmt.Sprintf("2^%d–2^%d ULP", level-1, level)
}
