// Command shot renders bitalign's main TUI screens to PNG files (make screenshots): it drives the real root
// model with key messages, feeds each frame through a terminal emulator (charmbracelet/x/vt) and draws the
// cells with Go Mono.
//
//	go run ./ui/internal/shot -out screenshots
package main

import (
	"context"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"

	"bitalign/ui"
)

func main() {
	out := flag.String("out", "screenshots", "directory for the PNG files")
	cols := flag.Int("cols", 140, "terminal width")
	rows := flag.Int("rows", 40, "terminal height")
	useFake := flag.Bool("fake", false, "use the UI's fake session instead of the engine's demo")
	flag.Parse()
	if err := run(*out, *cols, *rows, *useFake); err != nil {
		fmt.Fprintln(os.Stderr, "shot:", err)
		os.Exit(1)
	}
}

func run(out string, cols, rows int, useFake bool) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	r, err := NewRenderer(15)
	if err != nil {
		return err
	}
	load := ui.FakeLoader()
	if !useFake {
		tmp, err := os.MkdirTemp("", "bitalign-shot-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if load, err = demoLoader(tmp); err != nil {
			return err
		}
	}
	for _, s := range shots {
		w, h := cols, rows
		if s.cols > 0 {
			w, h = s.cols, s.rows
		}
		frame, err := ui.Script(context.Background(), load, w, h, s.keys...)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		img := r.Render(frame, w, h)
		path := filepath.Join(out, s.name+".png")
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := png.Encode(f, img); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

// shots are the screens, each reached by typing keys after loading.
var shots = []struct {
	name       string
	keys       []string
	cols, rows int
}{
	{name: "overview"},
	{name: "heatmap", keys: []string{"enter", ".", ".", "m"}},
	{name: "bits", keys: []string{"enter", ".", ".", "}", "m"}},
	{name: "replay", keys: []string{"enter", ".", ".", "m", "r"}},
	{name: "help", keys: []string{"?"}},
	{name: "overview-80x24", cols: 80, rows: 24},
}

// demoLoader generates the engine's demo (the TUI's default fault) in a temporary directory and works from
// there, so the screenshots show the relative paths demo/trainer and demo/sampler.
func demoLoader(tmp string) (ui.Loader, error) {
	if err := os.Chdir(tmp); err != nil {
		return nil, err
	}
	return ui.DemoLoader("demo", ui.DefaultDemoFault, ui.DefaultDemoFaultLayer, "cpu"), nil
}
