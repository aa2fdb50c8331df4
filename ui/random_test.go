package ui

import (
	"math/rand/v2"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/ui/internal/fake"
	"bitalign/ui/keys"
)

// TestRandomKeys presses random keys of the table (and resizes, clicks, wheels) and checks after each that
// the frame is exactly the terminal's size: no panic, no garbled layout, whatever the order.
func TestRandomKeys(t *testing.T) {
	var names []string
	for _, e := range keys.Table {
		for _, k := range e.Binding.Keys() {
			if k != "q" && k != "ctrl+c" && k != "e" && k != "pgdown" && k != "pgup" && k != "ctrl+b" && k != "ctrl+f" {
				names = append(names, k)
			}
		}
	}
	names = append(names, "x", "z", "1")
	cfg := fake.Default()
	cfg.PairErrOp = "layers.1.attn.sdpa"
	for seed := uint64(1); seed <= 4; seed++ {
		randomKeys(t, loaded(t, cfg, 100, 30), names, rand.New(rand.NewPCG(seed, 2)))
	}
}

func randomKeys(t *testing.T, m *Model, names []string, r *rand.Rand) {
	sizes := [][2]int{{80, 24}, {100, 30}, {200, 60}, {120, 40}, {81, 25}}
	for i := 0; i < 600; i++ {
		switch x := r.IntN(20); {
		case x == 0:
			s := sizes[r.IntN(len(sizes))]
			m.Update(tea.WindowSizeMsg{Width: s[0], Height: s[1]})
		case x == 1:
			_, cmd := m.Update(tea.MouseClickMsg{X: r.IntN(m.w), Y: r.IntN(m.h), Button: tea.MouseLeft})
			run(t, m, cmd)
		case x == 2:
			m.Update(tea.MouseWheelMsg{X: r.IntN(m.w), Y: r.IntN(m.h), Button: tea.MouseWheelDown})
		default:
			k := names[r.IntN(len(names))]
			if k == "shift+up" || k == "shift+down" || k == "shift+left" || k == "shift+right" {
				k = "J"
			}
			if other := press(t, m, k); hasQuit(other) {
				t.Fatalf("key %q quit", k)
			}
			if m.prompt == filterPrompt && r.IntN(3) == 0 {
				press(t, m, "enter")
			}
		}
		checkFrame(t, m)
	}
}
