package ui

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"bitalign/internal/golden"
	"bitalign/session/view"
	"bitalign/ui/heatmap"
	"bitalign/ui/internal/fake"
)

// run executes cmd and feeds the UI's own messages back (see drive).
func run(t *testing.T, m *Model, cmd tea.Cmd) []tea.Msg {
	t.Helper()
	return drive(m, cmd)
}

func fakeLoader(src view.Source, err error) view.Loader {
	return func(ctx context.Context, progress func(view.Progress)) (view.Source, error) {
		progress(view.Progress{Stage: "diffing", Done: 1, Total: 2})
		return src, err
	}
}

var fakes = map[fake.Config]*fake.Source{}

// loaded returns a model over the default fake session, loaded and sized w×h.
func loaded(t *testing.T, cfg fake.Config, w, h int) *Model {
	t.Helper()
	src, ok := fakes[cfg]
	if !ok {
		src = fake.New(cfg) // read-only once built: shared between tests
		fakes[cfg] = src
	}
	m := New(context.Background(), fakeLoader(src, nil), "demo")
	m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	run(t, m, m.Init())
	if m.rep == nil {
		t.Fatal("model did not load")
	}
	return m
}

// press sends key presses by their names ("j", "enter", "ctrl+c", "shift+up", or a literal rune).
func press(t *testing.T, m *Model, names ...string) []tea.Msg {
	t.Helper()
	var other []tea.Msg
	for _, n := range names {
		_, cmd := m.Update(keyMsg(n))
		other = append(other, run(t, m, cmd)...)
	}
	return other
}

func keyMsg(n string) tea.KeyPressMsg { return keyPress(n) }

// typeText sends each rune of s as a key press.
func typeText(t *testing.T, m *Model, s string) {
	t.Helper()
	for _, r := range s {
		press(t, m, string(r))
	}
}

// text is the rendered view without colour, trailing spaces trimmed.
func text(m *Model) string {
	lines := strings.Split(ansi.Strip(m.Render()), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	return strings.Join(lines, "\n")
}

// goldenFrame compares got with testdata/ui/name.golden (rewritten with -update).
func goldenFrame(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("..", "testdata", "ui", name+".golden"), []byte(got), "go test ./ui -update")
}

func prepare(p *view.Pair) (*heatmap.Data, error) { return heatmap.Prepare(p) }
