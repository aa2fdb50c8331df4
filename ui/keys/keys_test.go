package keys

import (
	"path/filepath"
	"testing"

	"bitalign/internal/golden"
)

// TestDocs fails when docs/keys.md is not what the table generates.
func TestDocs(t *testing.T) {
	golden.Check(t, filepath.Join("..", "..", "docs", "keys.md"), []byte(Markdown()), "go test ./ui/keys -run TestDocs -update")
}

// TestNoDuplicateKeys: one key, one action.
func TestNoDuplicateKeys(t *testing.T) {
	seen := map[string]Action{}
	for _, e := range Table {
		for _, k := range e.Binding.Keys() {
			if a, ok := seen[k]; ok {
				t.Errorf("key %q bound to both %d and %d", k, a, e.Action)
			}
			seen[k] = e.Action
		}
	}
}

func TestLookup(t *testing.T) {
	for k, want := range map[string]Action{"q": Quit, "ctrl+c": Quit, "N": PrevDiv, "n": NextDiv, "/": Filter, "x": Routing, "z": None} {
		if got := Lookup(k); got != want {
			t.Errorf("Lookup(%q) = %d, want %d", k, got, want)
		}
	}
	var km KeyMap
	if len(km.FullHelp()) != len(Groups) || len(km.ShortHelp()) == 0 {
		t.Error("KeyMap: want one column per group and a non-empty short help")
	}
}

func TestShortHelpFitsMinimumWidth(t *testing.T) {
	for _, c := range []Context{Loading, Overview, Tensor, Routes} {
		n := 0
		for _, b := range ShortFor(c) {
			n += len([]rune(b.Help().Key)) + 1 + len([]rune(b.Help().Desc)) + 3
		}
		if n > 80 {
			t.Errorf("context %d: the one-line help needs %d cells, more than the 80 of the smallest terminal", c, n)
		}
		if len(ShortFor(c)) == 0 {
			t.Errorf("context %d has no short help", c)
		}
	}
}
