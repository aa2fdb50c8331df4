package engine

import (
	"path/filepath"
	"testing"
)

func TestDemoCanonicalIdentical(t *testing.T) {
	dir := t.TempDir()
	if err := Demo(dir, DemoOptions{}); err != nil {
		t.Fatal(err)
	}
	d, missing, err := compareCaptures(DemoConfig(), filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"))
	if err != nil {
		t.Fatal(err)
	}
	if d != nil || missing != 0 {
		t.Fatalf("canonical demo diverges: %v, %d missing", d, missing)
	}
}
