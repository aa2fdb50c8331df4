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
	NextSuspect
	PrevSuspect
	Sequences
	Replay
	Routing
	Filter
	Export
	Help
	Quit
)

// Context is where the UI is, for the one-line help at the bottom of the screen.
type Context uint8

const (
	Loading  Context = 1 << iota // no session yet
	Overview                     // the op list
	Tensor                       // the tensor view
	Routes                       // the routing view (MoE layers × tokens)
	Seqs                         // the sequences view
)

// Entry is one row of the table.
type Entry struct {
	Action  Action
	Group   string
	Binding key.Binding
	Short   Context // contexts whose one-line help shows this key
	Where   string  // where the key applies, for the docs: "everywhere", "op list", "tensor view"
}

const (
	ov, tv, rv, sq, all = Overview, Tensor, Routes, Seqs, Loading | Overview | Tensor | Routes | Seqs
)

// Groups in display order.
var Groups = []string{"Navigate", "Debug", "General"}

func b(keys []string, help, desc string) key.Binding {
	return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
}

// Table is the key table, in help order.
var Table = []Entry{
	{Up, "Navigate", b([]string{"up", "k"}, "↑/k", "move up (op list, heatmap cursor)"), 0, "everywhere"},
	{Down, "Navigate", b([]string{"down", "j"}, "↓/j", "move down"), 0, "everywhere"},
	{Left, "Navigate", b([]string{"left", "h"}, "←/h", "heatmap cursor left"), 0, "tensor view"},
	{Right, "Navigate", b([]string{"right", "l"}, "→/l", "heatmap cursor right"), 0, "tensor view"},
	{FastUp, "Navigate", b([]string{"K", "shift+up"}, "K", "cursor up 8 cells"), 0, "tensor view"},
	{FastDown, "Navigate", b([]string{"J", "shift+down"}, "J", "cursor down 8 cells"), 0, "tensor view"},
	{FastLeft, "Navigate", b([]string{"H", "shift+left"}, "H", "cursor left 8 cells"), 0, "tensor view"},
	{FastRight, "Navigate", b([]string{"L", "shift+right"}, "L", "cursor right 8 cells"), 0, "tensor view"},
	{PageUp, "Navigate", b([]string{"pgup", "ctrl+b"}, "pgup", "page up"), 0, "op list"},
	{PageDown, "Navigate", b([]string{"pgdown", "ctrl+f"}, "pgdn", "page down"), 0, "op list"},
	{Top, "Navigate", b([]string{"home", "g"}, "g", "first op"), 0, "everywhere"},
	{Bottom, "Navigate", b([]string{"end", "G"}, "G", "last op"), 0, "everywhere"},
	{Open, "Navigate", b([]string{"enter"}, "enter", "open the op (routing: the token's experts; sequences: its first diff op)"), ov | rv | sq, "op list, routing and sequences views"},
	{Back, "Navigate", b([]string{"esc"}, "esc", "back / cancel"), tv | rv | sq, "everywhere"},
	{Focus, "Navigate", b([]string{"tab"}, "tab", "switch overview ⇄ tensor view"), 0, "everywhere"},

	{First, "Debug", b([]string{"f"}, "f", "jump to the first divergence"), ov, "everywhere"},
	{NextDiv, "Debug", b([]string{"n"}, "n", "next divergent op (routing view: next flip)"), ov | rv, "everywhere"},
	{PrevDiv, "Debug", b([]string{"N"}, "N", "previous divergent op (routing view: previous flip)"), 0, "everywhere"},
	{StepNext, "Debug", b([]string{"]"}, "]", "step to the next op (keeps the token)"), tv, "everywhere"},
	{StepPrev, "Debug", b([]string{"["}, "[", "step to the previous op"), 0, "everywhere"},
	{LayerNext, "Debug", b([]string{"}"}, "}", "same op, next layer"), tv, "everywhere"},
	{LayerPrev, "Debug", b([]string{"{"}, "{", "same op, previous layer"), 0, "everywhere"},
	{MaxCell, "Debug", b([]string{"m"}, "m", "max difference of the slice, again: of the op"), tv, "tensor view"},
	{NextSeq, "Debug", b([]string{"."}, ".", "next captured sequence"), 0, "tensor view"},
	{PrevSeq, "Debug", b([]string{","}, ",", "previous captured sequence"), 0, "tensor view"},
	{Sequences, "Debug", b([]string{"t"}, "t", "sequences view: per-sequence logprob mismatch, worst first"), sq, "everywhere"},
	{NextSuspect, "Debug", b([]string{"s"}, "s", "next suspect of the audit (--checkpoint)"), 0, "everywhere"},
	{PrevSuspect, "Debug", b([]string{"S"}, "S", "previous audit suspect"), 0, "everywhere"},
	{Replay, "Debug", b([]string{"r"}, "r", "replay the op from each side's inputs"), tv, "everywhere"},
	{Routing, "Debug", b([]string{"x"}, "x", "routing view: MoE layers × tokens, flips marked, a token's experts on both sides"), rv, "everywhere"},
	{Filter, "Debug", b([]string{"/"}, "/", "filter ops by name"), ov, "everywhere"},
	{Export, "Debug", b([]string{"e"}, "e", "export the report (.md .json .html)"), 0, "everywhere"},

	{Help, "General", b([]string{"?"}, "?", "toggle help"), all, "everywhere"},
	{Quit, "General", b([]string{"q", "ctrl+c"}, "q", "quit"), all, "everywhere"},
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

// ShortHelp is the bottom help line of the overview.
func (KeyMap) ShortHelp() []key.Binding { return ShortFor(Overview) }

// shortDesc is the terse description the one-line help uses.
var shortDesc = map[Action]string{Open: "open", Back: "back", Sequences: "sequences", First: "first diff", NextDiv: "next/prev diff",
	StepNext: "step", LayerNext: "layer", MaxCell: "max diff", NextSuspect: "suspect", Replay: "replay", Routing: "routing", Filter: "filter", Help: "help",
	Quit: "quit"}

// shortKey shows a key pair as one item of the one-line help.
var shortKey = map[Action]string{NextDiv: "n/N", StepNext: "]/[", LayerNext: "}/{"}

// ShortFor is the bottom help line in context c.
func ShortFor(c Context) []key.Binding {
	var out []key.Binding
	for _, e := range Table {
		if e.Short&c != 0 {
			d := shortDesc[e.Action]
			if d == "" {
				d = e.Binding.Help().Desc
			}
			k := shortKey[e.Action]
			if k == "" {
				k = e.Binding.Help().Key
			}
			out = append(out, key.NewBinding(key.WithKeys(e.Binding.Keys()...), key.WithHelp(k, d)))
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
