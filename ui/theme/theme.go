// Package theme turns a small set of semantic colours into the Styles every component draws with. Styles are
// built once (New) and passed down; no component picks its own colours.
package theme

import (
	"image/color"

	"charm.land/lipgloss/v2"
)

// Theme is the semantic palette. Colours are true-colour; the renderer downsamples them to 256 or 16 colours
// or drops them, following the terminal's profile.
type Theme struct {
	Text, Muted, Faint, Border, Accent color.Color
	Good, Bad, Warn, Info              color.Color
	SelectionBg, HeaderBg              color.Color
	Sign, Exp, Mant                    color.Color // bit fields
	Zero                               color.Color // heatmap: bitwise equal
	Ramp                               []color.Color
}

// Dark is the default theme: a restrained slate palette with one accent and a heat ramp for ULP.
func Dark() Theme {
	c := lipgloss.Color
	return Theme{
		Text: c("#D8DEE9"), Muted: c("#8A93A6"), Faint: c("#596275"), Border: c("#3B4252"), Accent: c("#7AA2F7"),
		Good: c("#9ECE6A"), Bad: c("#F7768E"), Warn: c("#E0AF68"), Info: c("#7DCFFF"),
		SelectionBg: c("#283457"), HeaderBg: c("#1F2335"),
		Sign: c("#BB9AF7"), Exp: c("#7DCFFF"), Mant: c("#9ECE6A"),
		Zero: c("#262B3A"),
		// ULP levels 1..8 (see Level): 1 ulp, 2–3, 4–7, 8–15, 16–63, 64–255, 256–4095, ≥4096.
		Ramp: []color.Color{c("#3D5A80"), c("#4F7CAC"), c("#E9C46A"), c("#F4A261"), c("#E76F51"), c("#D62828"),
			c("#B5179E"), c("#F72585")},
	}
}

// Levels is the number of heat levels above zero.
const Levels = 8

// Level maps a log2 ULP bucket (0 = equal, b = ULP in [2^(b-1), 2^b)) to a heat level 0..Levels.
func Level(bucket uint8) int {
	switch {
	case bucket <= 4:
		return int(bucket)
	case bucket <= 6:
		return 5
	case bucket <= 8:
		return 6
	case bucket <= 12:
		return 7
	}
	return 8
}

// IntLevel is the heat level of an integer element that differs (a token, a sampled id, an expert id): integer
// differences are counted, not measured, so every one is drawn at the top of the ramp.
const IntLevel = Levels

// ValueLevel is the heat level of a log2 difference bucket: Level for floats, IntLevel for any integer
// difference.
func ValueLevel(bucket uint8, integer bool) int {
	if integer && bucket > 0 {
		return IntLevel
	}
	return Level(bucket)
}

// LevelLabel is the legend text for a heat level.
func LevelLabel(l int) string {
	return [...]string{"0", "1", "2", "4", "8", "16", "64", "256", "4k+"}[l]
}

// Styles are the theme's colours made into lipgloss styles, built once.
type Styles struct {
	Theme Theme
	Color bool // false on no-colour terminals: heat is drawn with shade glyphs instead

	Text, Muted, Faint, Accent, Bold lipgloss.Style
	Good, Bad, Warn, Info            lipgloss.Style
	Title, PanelTitle, Border        lipgloss.Style
	Header, HeaderTitle              lipgloss.Style
	Selected, SelectedMark           lipgloss.Style
	Key, KeyDesc                     lipgloss.Style
	StatusErr, StatusOK, StatusInfo  lipgloss.Style
	Sign, Exp, Mant, BitDiff         lipgloss.Style
	Cursor                           lipgloss.Style
	Heat                             []lipgloss.Style // foreground per level 0..Levels
}

// New builds the Styles of t.
func New(t Theme) Styles {
	fg := func(c color.Color) lipgloss.Style { return lipgloss.NewStyle().Foreground(c) }
	s := Styles{Theme: t, Color: true}
	s.Text = fg(t.Text)
	s.Muted = fg(t.Muted)
	s.Faint = fg(t.Faint)
	s.Accent = fg(t.Accent)
	s.Bold = lipgloss.NewStyle().Bold(true)
	s.Good, s.Bad, s.Warn, s.Info = fg(t.Good), fg(t.Bad), fg(t.Warn), fg(t.Info)
	s.Title = fg(t.Text).Bold(true)
	s.PanelTitle = fg(t.Accent).Bold(true)
	s.Border = fg(t.Border)
	s.Header = lipgloss.NewStyle().Background(t.HeaderBg).Foreground(t.Muted)
	s.HeaderTitle = lipgloss.NewStyle().Background(t.Accent).Foreground(lipgloss.Color("#1A1B26")).Bold(true)
	s.Selected = lipgloss.NewStyle().Background(t.SelectionBg).Foreground(t.Text).Bold(true)
	s.SelectedMark = lipgloss.NewStyle().Background(t.SelectionBg).Foreground(t.Accent).Bold(true)
	s.Key = fg(t.Accent).Bold(true)
	s.KeyDesc = fg(t.Muted)
	s.StatusErr = fg(t.Bad).Bold(true)
	s.StatusOK = fg(t.Good)
	s.StatusInfo = fg(t.Muted)
	s.Sign, s.Exp, s.Mant = fg(t.Sign), fg(t.Exp), fg(t.Mant)
	s.BitDiff = lipgloss.NewStyle().Foreground(lipgloss.Color("#1A1B26")).Background(t.Bad).Bold(true)
	s.Cursor = lipgloss.NewStyle().Foreground(lipgloss.Color("#FFFFFF")).Bold(true)
	s.Heat = make([]lipgloss.Style, Levels+1)
	s.Heat[0] = fg(t.Zero)
	for l := 1; l <= Levels; l++ {
		s.Heat[l] = fg(t.Ramp[l-1])
	}
	return s
}

// Default is New(Dark()).
func Default() Styles { return New(Dark()) }

// HeatColor is the colour of heat level l.
func (s Styles) HeatColor(l int) color.Color {
	if l == 0 {
		return s.Theme.Zero
	}
	return s.Theme.Ramp[l-1]
}

// Shade is the glyph standing for heat level l on no-colour terminals.
func Shade(l int) string {
	return [...]string{"·", "░", "░", "▒", "▒", "▓", "▓", "█", "█"}[l]
}
