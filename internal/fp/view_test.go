package fp

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestF32View(t *testing.T) {
	buf := F32Bytes(make([]float32, 6)) // 4-byte aligned
	vals := []float32{1, -0, float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), 3.5}
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	v, ok := F32View(buf[:20])
	if !ok || len(v) != 5 {
		t.Fatalf("F32View of 20 aligned bytes: %v, %d values", ok, len(v))
	}
	for i := range vals {
		if math.Float32bits(v[i]) != math.Float32bits(vals[i]) {
			t.Errorf("value %d: %#x, want %#x", i, math.Float32bits(v[i]), math.Float32bits(vals[i]))
		}
	}
	if !bytes.Equal(F32Bytes(v), buf[:20]) {
		t.Error("F32Bytes of the view is not the bytes it views")
	}
	if _, ok := F32View(buf[1:5]); ok {
		t.Error("F32View accepted a misaligned slice")
	}
	if _, ok := F32View(buf[:6]); ok {
		t.Error("F32View accepted a partial value")
	}
	// +0 and −0 are different bits
	if bytes.Equal(F32Bytes([]float32{0}), F32Bytes([]float32{float32(math.Copysign(0, -1))})) {
		t.Error("F32Bytes: +0 and −0 compare equal")
	}
}
