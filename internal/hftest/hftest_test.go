package hftest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestArgmax(t *testing.T) {
	for _, c := range []struct {
		x    []float32
		want int
	}{{nil, 0}, {[]float32{1}, 0}, {[]float32{1, 3, 2}, 1}, {[]float32{-1, -5, 4, 4}, 2}, {[]float32{2, 1, 2}, 0}} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	if got := Argmax([]float64{0, -1, 7.5, 7}); got != 2 {
		t.Errorf("float64: %d, want 2", got)
	}
}

func TestEachDir(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"b", "a"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("BITALIGN_HFTEST_DIR", root)
	var seen []string
	EachDir(t, "BITALIGN_HFTEST_DIR", "unset", func(t *testing.T, dir string) {
		seen = append(seen, t.Name()+" "+dir)
	})
	want := []string{"TestEachDir/a " + filepath.Join(root, "a"), "TestEachDir/b " + filepath.Join(root, "b")}
	if !slices.Equal(seen, want) {
		t.Errorf("ran %q, want %q", seen, want)
	}
	t.Run("unset", func(t *testing.T) {
		t.Setenv("BITALIGN_HFTEST_DIR", "")
		EachDir(t, "BITALIGN_HFTEST_DIR", "unset", func(t *testing.T, dir string) { t.Errorf("ran %s", dir) })
		t.Error("did not skip")
	})
}
