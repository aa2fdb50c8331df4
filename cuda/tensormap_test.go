package cuda

import (
	"strings"
	"testing"
	"unsafe"
)

// TestTiled2DCheck: every rule of cuTensorMapEncodeTiled that Check enforces is refused with a message naming it,
// and the tc matmul's maps (bf16, 128-byte rows, 128-byte swizzle) pass.
func TestTiled2DCheck(t *testing.T) {
	ok := Tiled2D{Type: TensorMapBFloat16, Base: 1 << 20, Rows: 4096, Cols: 3584, RowStride: 2 * 3584, BoxRows: 256,
		BoxCols: 64, Swizzle: Swizzle128B, L2Promotion256: true}
	if err := ok.Check(); err != nil {
		t.Fatalf("the tc map: %v", err)
	}
	bad := []struct {
		why string
		mod func(*Tiled2D)
	}{
		{"data type", func(m *Tiled2D) { m.Type = 42 }},
		{"16-byte aligned", func(m *Tiled2D) { m.Base += 8 }},
		{"dimensions", func(m *Tiled2D) { m.Rows = 0 }},
		{"multiple of 16", func(m *Tiled2D) { m.RowStride = 2 * 3580; m.Cols = 3580 }},
		{"shorter than a row", func(m *Tiled2D) { m.RowStride = 16 }},
		{"box", func(m *Tiled2D) { m.BoxRows = 257 }},
		{"not a multiple of 16", func(m *Tiled2D) { m.BoxCols = 4 }},
		{"swizzle span", func(m *Tiled2D) { m.BoxCols = 128 }},
		{"interleave", func(m *Tiled2D) { m.Interleave = true }},
	}
	for _, b := range bad {
		m := ok
		b.mod(&m)
		if err := m.Check(); err == nil || !strings.Contains(err.Error(), b.why) {
			t.Errorf("%s: Check() = %v", b.why, err)
		}
	}
}

// TestEncodeTiled (GPU): the driver encodes the tc matmul's map into 128 bytes at a 64-byte-aligned address, and
// a map Check refuses never reaches it.
func TestEncodeTiled(t *testing.T) {
	d := openOrSkip(t)
	err := d.Do(func(c *Ctx) error {
		p, err := c.Alloc(2 * 1024 * 1024)
		if err != nil {
			return err
		}
		defer c.Free(p)
		m, err := c.EncodeTiled(Tiled2D{Type: TensorMapBFloat16, Base: p, Rows: 1000, Cols: 1024, RowStride: 2048,
			BoxRows: 128, BoxCols: 64, Swizzle: Swizzle128B, L2Promotion256: true})
		if err != nil {
			return err
		}
		if len(m.Bytes()) != TensorMapBytes || uintptr(unsafe.Pointer(&m.Bytes()[0]))%64 != 0 {
			t.Errorf("map of %d bytes at %p", len(m.Bytes()), &m.Bytes()[0])
		}
		zero := true
		for _, b := range m.Bytes() {
			zero = zero && b == 0
		}
		if zero {
			t.Error("the driver left the map all zero")
		}
		if _, err := c.EncodeTiled(Tiled2D{Type: TensorMapBFloat16, Base: p + 2, Rows: 8, Cols: 64, RowStride: 128,
			BoxRows: 8, BoxCols: 64}); err == nil || !strings.Contains(err.Error(), "aligned") {
			t.Errorf("a misaligned base: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
