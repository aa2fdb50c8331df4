package ui

import (
	"context"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"bitalign/session"
	"bitalign/session/view"
	"bitalign/ui/internal/fake"
	"bitalign/ui/internal/shot"
)

var (
	shotsDir  = flag.String("shots", "", "render the main screens as PNG files into this directory (make screenshots)")
	shotsFake = flag.Bool("shots-fake", false, "screenshots of the fake session instead of the engine's demo")
)

// shots are the screens, each reached by typing keys after loading; moe shots load the MoE demo with its
// router-split-k fault instead of the default demo.
var shots = []struct {
	name       string
	keys       []string
	cols, rows int
	moe        bool
}{
	{name: "overview"},
	{name: "heatmap", keys: []string{"enter", ".", ".", "m"}},
	{name: "bits", keys: []string{"enter", ".", ".", "}", "m"}},
	{name: "replay", keys: []string{"enter", ".", ".", "m", "r"}},
	{name: "help", keys: []string{"?"}},
	{name: "overview-80x24", cols: 80, rows: 24},
	{name: "routing", keys: []string{"x", "n"}, moe: true},
	{name: "sequences", keys: []string{"t"}, moe: true},
}

// TestScreenshots renders the main TUI screens (overview, heatmap, bit view, replay verdict, help) at 140×40
// to PNG files: `make screenshots` runs it with -shots. The demo is generated in a temporary directory entered
// as the working directory, so the screens show the relative paths demo/trainer and demo/sampler.
func TestScreenshots(t *testing.T) {
	if *shotsDir == "" {
		t.Skip("screenshots are rendered only with -shots DIR (make screenshots)")
	}
	out, err := filepath.Abs(*shotsDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := shot.NewRenderer(15)
	if err != nil {
		t.Fatal(err)
	}
	loaders := map[bool]view.Loader{}
	loader := func(moe bool) view.Loader {
		if l := loaders[moe]; l != nil {
			return l
		}
		switch {
		case *shotsFake && moe:
			loaders[moe] = fakeLoader(fake.New(fake.MoEDefault()), nil)
		case *shotsFake:
			loaders[moe] = fakeLoader(fake.New(fake.Default()), nil)
		default:
			fault, dir := session.DefaultDemoFault, "demo"
			if moe {
				fault, dir = "router-split-k", "demo-moe"
			}
			in, err := session.DemoInputs(context.Background(), dir, fault, session.DefaultDemoLayer, nil)
			if err != nil {
				t.Fatal(err)
			}
			in.Device = "cpu"
			loaders[moe] = loaderOf(in)
		}
		return loaders[moe]
	}
	if !*shotsFake {
		t.Chdir(t.TempDir())
	}
	for _, s := range shots {
		load := loader(s.moe)
		w, h := 140, 40
		if s.cols > 0 {
			w, h = s.cols, s.rows
		}
		frame, err := script(context.Background(), load, w, h, s.keys...)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		path := filepath.Join(out, s.name+".png")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, r.Render(frame, w, h)); err != nil {
			f.Close()
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote", path)
	}
}
