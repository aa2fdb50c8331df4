package rss

import "testing"

// TestPeakGrows: touching 64 MiB raises the peak by about that much.
func TestPeakGrows(t *testing.T) {
	before := Peak()
	if before <= 0 {
		t.Fatalf("peak RSS %d", before)
	}
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after := Peak()
	if after-before < 48<<20 {
		t.Errorf("peak RSS %d → %d after touching 64 MiB", before, after)
	}
	sink = b[len(b)-4096]
}

var sink byte
