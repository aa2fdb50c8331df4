// Package keys is the one table of every key the TUI answers to. The help screen, the short help line and
// docs/keys.md are all generated from it (a test fails when docs/keys.md is stale).
package keys

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
)

// Action is what a key does.
type Action int

const (
	None Action = iota
	Up
	Down
	Left
	Right
	FastUp
	FastDown
	FastLeft
	FastRight
	PageUp
	PageDown
	Top
	Bottom
	Open
	Back
	Focus
	First
	NextDiv
	PrevDiv
	StepNext
	StepPrev
	LayerNext
	LayerPrev
	MaxCell
	NextSeq
	PrevSeq
	Replay
	Filter
	Export
	Help
	Quit
)

// Entry is one row of the table.
type Entry struct {
	Action  Action
	Group   string
	Binding key.Binding
	Short   bool   // shown in the one-line help at the bottom
	Where   string // where the key applies, for the docs: "everywhere", "op list", "tensor view"
}

// Groups in display order.
var Groups = []string{"Navigate", "Debug", "General"}

func b(keys []string, help, desc string) key.Binding {
	return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
}

// Table is the key table, in help order.
var Table = []Entry{
	{Up, "Navigate", b([]string{"up", "k"}, "↑/k", "move up (op list, heatmap cursor)"), false, "everywhere"},
	{Down, "Navigate", b([]string{"down", "j"}, "↓/j", "move down"), false, "everywhere"},
	{Left, "Navigate", b([]string{"left", "h"}, "←/h", "heatmap cursor left"), false, "tensor view"},
	{Right, "Navigate", b([]string{"right", "l"}, "→/l", "heatmap cursor right"), false, "tensor view"},
	{FastUp, "Navigate", b([]string{"K", "shift+up"}, "K", "cursor up 8 cells"), false, "tensor view"},
	{FastDown, "Navigate", b([]string{"J", "shift+down"}, "J", "cursor down 8 cells"), false, "tensor view"},
	{FastLeft, "Navigate", b([]string{"H", "shift+left"}, "H", "cursor left 8 cells"), false, "tensor view"},
	{FastRight, "Navigate", b([]string{"L", "shift+right"}, "L", "cursor right 8 cells"), false, "tensor view"},
	{PageUp, "Navigate", b([]string{"pgup", "ctrl+b"}, "pgup", "page up"), false, "op list"},
	{PageDown, "Navigate", b([]string{"pgdown", "ctrl+f"}, "pgdn", "page down"), false, "op list"},
	{Top, "Navigate", b([]string{"home", "g"}, "g", "first op"), false, "op list"},
	{Bottom, "Navigate", b([]string{"end", "G"}, "G", "last op"), false, "op list"},
	{Open, "Navigate", b([]string{"enter"}, "enter", "open the tensor view of the op"), true, "op list"},
	{Back, "Navigate", b([]string{"esc"}, "esc", "back / cancel"), false, "everywhere"},
	{Focus, "Navigate", b([]string{"tab"}, "tab", "switch overview ⇄ tensor view"), false, "everywhere"},

	{First, "Debug", b([]string{"f"}, "f", "jump to the first divergence"), true, "everywhere"},
	{NextDiv, "Debug", b([]string{"n"}, "n", "next divergent op"), true, "everywhere"},
	{PrevDiv, "Debug", b([]string{"N"}, "N", "previous divergent op"), true, "everywhere"},
	{StepNext, "Debug", b([]string{"]"}, "]", "step to the next op (keeps the token)"), true, "everywhere"},
	{StepPrev, "Debug", b([]string{"["}, "[", "step to the previous op"), false, "everywhere"},
	{LayerNext, "Debug", b([]string{"}"}, "}", "same op, next layer"), false, "everywhere"},
	{LayerPrev, "Debug", b([]string{"{"}, "{", "same op, previous layer"), false, "everywhere"},
	{MaxCell, "Debug", b([]string{"m"}, "m", "cursor to the largest ULP"), false, "tensor view"},
	{NextSeq, "Debug", b([]string{"."}, ".", "next captured sequence"), false, "tensor view"},
	{PrevSeq, "Debug", b([]string{","}, ",", "previous captured sequence"), false, "tensor view"},
	{Replay, "Debug", b([]string{"r"}, "r", "replay the op from each side's inputs"), true, "everywhere"},
	{Filter, "Debug", b([]string{"/"}, "/", "filter ops by name"), true, "everywhere"},
	{Export, "Debug", b([]string{"e"}, "e", "export the report (.md .json .html)"), true, "everywhere"},

	{Help, "General", b([]string{"?"}, "?", "toggle help"), true, "everywhere"},
	{Quit, "General", b([]string{"q", "ctrl+c"}, "q", "quit"), true, "everywhere"},
}

// Lookup returns the action bound to a key string (tea.KeyPressMsg.String()), or None.
func Lookup(k string) Action {
	for _, e := range Table {
		for _, kk := range e.Binding.Keys() {
			if kk == k {
				return e.Action
			}
		}
	}
	return None
}

// Binding returns the binding of a, for tests and the help line.
func Binding(a Action) key.Binding {
	for _, e := range Table {
		if e.Action == a {
			return e.Binding
		}
	}
	return key.Binding{}
}

// KeyMap implements help.KeyMap over Table.
type KeyMap struct{}

// ShortHelp is the bottom help line.
func (KeyMap) ShortHelp() []key.Binding {
	var out []key.Binding
	for _, e := range Table {
		if e.Short {
			out = append(out, e.Binding)
		}
	}
	return out
}

// FullHelp is one column per group.
func (KeyMap) FullHelp() [][]key.Binding {
	var out [][]key.Binding
	for _, g := range Groups {
		var col []key.Binding
		for _, e := range Table {
			if e.Group == g {
				col = append(col, e.Binding)
			}
		}
		out = append(out, col)
	}
	return out
}

// Markdown renders the table as docs/keys.md.
func Markdown() string {
	var s strings.Builder
	s.WriteString("# bitalign TUI keys\n\n")
	s.WriteString("Generated from `ui/keys/keys.go` by `go test ./ui/keys -run TestDocs -update`; do not edit by hand.\n")
	for _, g := range Groups {
		fmt.Fprintf(&s, "\n## %s\n\n| Keys | Action | Where |\n|---|---|---|\n", g)
		for _, e := range Table {
			if e.Group != g {
				continue
			}
			ks := make([]string, len(e.Binding.Keys()))
			for i, k := range e.Binding.Keys() {
				ks[i] = "`" + k + "`"
			}
			fmt.Fprintf(&s, "| %s | %s | %s |\n", strings.Join(ks, ", "), e.Binding.Help().Desc, e.Where)
		}
	}
	s.WriteString("\nMouse: click an op to select it (click again to open it), click a heatmap cell to move the cursor, " +
		"wheel scrolls the op list or moves the heatmap cursor.\n")
	return s.String()
}
