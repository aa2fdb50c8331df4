package ui

import (
	"context"
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/heatmap"
	"bitalign/ui/internal/fake"
)

// script runs the UI headlessly at w×h: it loads, types keys (names as in docs/keys.md: "enter", "j", "?"),
// runs every background command to completion, and returns the final frame (with colour).
func script(ctx context.Context, load view.Loader, w, h int, keys ...string) (string, error) {
	m := New(ctx, load, "demo")
	m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	drive(m, m.Init())
	if m.loadErr != nil {
		return "", m.loadErr
	}
	for _, k := range keys {
		_, cmd := m.Update(keyPress(k))
		drive(m, cmd)
	}
	return m.Render(), nil
}

// drive runs cmd and feeds the UI's own messages back until no command is left, as the program would;
// other messages (quit, cursor blinks) are returned.
func drive(m *Model, cmd tea.Cmd) []tea.Msg {
	var other []tea.Msg
	queue := []tea.Cmd{cmd}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		switch msg := c().(type) {
		case tea.BatchMsg:
			queue = append(queue, msg...)
		case progressMsg, loadedMsg, pairMsg, replayMsg, auditMsg, exportMsg, routeMsg, seqFirstMsg, heatmap.GridMsg:
			_, next := m.Update(msg)
			queue = append(queue, next)
		default:
			other = append(other, msg)
		}
	}
	return other
}

// keyPress builds the key message for a key name.
func keyPress(n string) tea.KeyPressMsg {
	special := map[string]rune{"enter": tea.KeyEnter, "esc": tea.KeyEscape, "tab": tea.KeyTab, "up": tea.KeyUp,
		"down": tea.KeyDown, "left": tea.KeyLeft, "right": tea.KeyRight, "backspace": tea.KeyBackspace,
		"pgdown": tea.KeyPgDown, "pgup": tea.KeyPgUp, "home": tea.KeyHome, "end": tea.KeyEnd, "space": tea.KeySpace}
	if c, ok := strings.CutPrefix(n, "ctrl+"); ok {
		return tea.KeyPressMsg{Code: []rune(c)[0], Mod: tea.ModCtrl}
	}
	if c, ok := strings.CutPrefix(n, "shift+"); ok {
		return tea.KeyPressMsg{Code: special[c], Mod: tea.ModShift}
	}
	if c, ok := special[n]; ok {
		return tea.KeyPressMsg{Code: c}
	}
	r := []rune(n)
	if len(r) != 1 {
		panic(fmt.Sprintf("ui: unknown key name %q", n))
	}
	return tea.KeyPressMsg{Code: r[0], Text: n}
}

var _ view.Source = (*fake.Source)(nil)
