package ui

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

func TestScratch(t *testing.T) {
	s, _ := Script(context.Background(), FakeLoader(), 120, 36, "enter", "r")
	for i, l := range strings.Split(s, "\n") {
		if w := ansi.StringWidth(l); w != 120 {
			fmt.Println("line", i, "width", w, ansi.Strip(l))
		}
	}
	em := vt.NewEmulator(120, 36)
	em.WriteString(strings.ReplaceAll(s, "\n", "\r\n"))
	for y := 22; y < 34; y++ {
		var b strings.Builder
		for x := 0; x < 120; x++ {
			if c := em.CellAt(x, y); c != nil {
				b.WriteString(c.Content)
			}
		}
		fmt.Println(b.String())
	}
}
