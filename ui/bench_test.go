package ui

import (
	"context"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/heatmap"
	"bitalign/ui/internal/fake"
)

func bigModel(b *testing.B) *Model {
	src := fake.Big(4096, 4096)
	m := New(context.Background(), fakeLoader(src, nil), "bench")
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	drive(m, m.Init())
	_, cmd := m.Update(keyPress("enter"))
	drive(m, cmd)
	if m.data == nil || m.data.Pair.Rows != 4096 {
		b.Fatal("the 4096×4096 tensor is not shown")
	}
	return m
}

// BenchmarkRenderTensor4096: one frame of the tensor view at 200×60 with a 4096×4096 bf16 tensor selected.
func BenchmarkRenderTensor4096(b *testing.B) {
	m := bigModel(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}

// BenchmarkRenderOverview: one frame of the overview at 200×60.
func BenchmarkRenderOverview(b *testing.B) {
	m := bigModel(b)
	m.Update(keyPress("esc"))
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}

// BenchmarkCursorMoveFrame: a key press that moves the heatmap cursor, then the frame it causes.
func BenchmarkCursorMoveFrame(b *testing.B) {
	m := bigModel(b)
	keys := []tea.KeyPressMsg{keyPress("l"), keyPress("h")}
	i := 0
	for b.Loop() {
		m.Update(keys[i%2])
		_ = m.View()
		i++
	}
}

// BenchmarkPrepare4096: per-element ULP buckets of a 4096×4096 pair (once per pair, in the background).
func BenchmarkPrepare4096(b *testing.B) {
	p, _ := fake.Big(4096, 4096).Pair(context.Background(), view.Key{Op: "layers.0.mlp.down_proj", Role: "out"})
	b.SetBytes(int64(len(p.A) + len(p.B)))
	for b.Loop() {
		if _, err := heatmap.Prepare(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResize4096: the UI thread's share of a resize with a 4096×4096 tensor open (the re-bin itself runs
// in the background: BenchmarkRebin4096).
func BenchmarkResize4096(b *testing.B) {
	m := bigModel(b)
	sizes := []tea.WindowSizeMsg{{Width: 200, Height: 60}, {Width: 199, Height: 59}}
	i := 0
	for b.Loop() {
		m.Update(sizes[i%2])
		i++
	}
}

// BenchmarkRebin4096: binning a 4096×4096 tensor for the heatmap at 200×60 (the background part of a resize).
func BenchmarkRebin4096(b *testing.B) {
	m := bigModel(b)
	for b.Loop() {
		heatmap.Downsample(m.data, 2*(50-1), 150)
	}
}
