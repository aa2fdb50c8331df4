package engine

import (
	"fmt"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// widened is m with every weight widened (exactly) to float32 Weights and the same config: the model dtype, so
// every op's rounding, stays m's. A forward of it is what a forward of m must equal bitwise.
func widened(m *Model) *Model {
	w := newModel(m.Config)
	dst := w.weightSpecsByName()
	for _, s := range m.weightSpecs() {
		*dst[s.name] = kernels.WeightsF32(s.ptr.Float32())
	}
	if m.Config.TiedEmbeddings {
		w.LMHead = w.Embed
	}
	return w
}

// heldBytes is the memory b holds on its backend: a weight in its stored dtype (CPU: the Weights; CUDA: 2 bytes
// an element for a 16-bit weight buffer) or 4 bytes an element for a float32 buffer.
func heldBytes(b Buf) int64 {
	switch x := b.(type) {
	case *cpuWeights:
		return x.w.Bytes()
	case *cudaBuf:
		return int64(x.n) * x.elem()
	}
	return 4 * int64(b.Len())
}

// rankWeightBytes sums what a rank's weights other than biases (embedding, LM head when not tied, projections,
// norm weights: the UploadWeights ones) hold on its backend, and counts them; bias is what its biases hold.
func rankWeightBytes(r *rank) (weights int64, count int, bias int64) {
	add := func(bs ...Buf) {
		for _, b := range bs {
			if b != nil {
				weights += heldBytes(b)
				count++
			}
		}
	}
	add(r.embed, r.norm)
	if r.lmHead != r.embed {
		add(r.lmHead)
	}
	for _, l := range r.layers {
		add(l.q, l.k, l.v, l.o, l.gate, l.up, l.down, l.router, l.sharedGate, l.shared.gate, l.shared.up, l.shared.down)
		add(l.attnNorm, l.mlpNorm, l.qn, l.kn)
		for _, x := range l.experts {
			add(x.gate, x.up, x.down)
		}
		for _, b := range []Buf{l.qb, l.kb, l.vb, l.ob} {
			if b != nil {
				bias += heldBytes(b)
			}
		}
	}
	return weights, count, bias
}

// checkpointBytes is the checkpoint size of m's tensors other than biases and their count, and the number of
// bias elements.
func checkpointBytes(m *Model) (weights int64, count int, biasElems int64) {
	for _, s := range m.weightSpecs() {
		if strings.HasSuffix(s.name, ".bias") {
			biasElems += int64(s.ptr.Len())
			continue
		}
		weights += s.ptr.Bytes()
		count++
	}
	return weights, count, biasElems
}

// TestCUDAF16Weights: an f16 checkpoint's weights are held as f16 on the backend (device memory for the weight
// matrices and norm weights = their checkpoint size, half a float32 copy's; biases, small, are float32 on every
// backend), and its sampler and trainer forwards (outputs and captures) equal those of the same model with every
// weight widened to float32, bitwise. On the CPU always; on the GPU when there is one (skipped here without one,
// required on the GPU machine), where it also equals the CPU's.
func TestCUDAF16Weights(t *testing.T) {
	backends := []struct {
		name string
		be   BackendFactory
	}{{"cpu", func(int) (Backend, error) { return NewCPU(), nil }}, {"cuda", nil}}
	for _, arch := range []string{ArchQwen2, ArchQwen3, ArchLlama} {
		cfg := tinyConfig(arch, capture.F16)
		cfg.TiedEmbeddings = arch == ArchLlama
		m := NewRandom(cfg, 11)
		wide := widened(m)
		want, wantN, biasElems := checkpointBytes(m)
		if wb, _, _ := checkpointBytes(wide); wb != 2*want {
			t.Fatalf("%s: widened weights take %d bytes, want twice the f16 checkpoint's %d", arch, wb, want)
		}
		ps, mn := tinyPrompts(cfg)
		cs, ct, csd, ctd := sampleThenTrain(t, m, ps, mn, 1, kernels.Canonical, nil)
		for _, b := range backends {
			t.Run(fmt.Sprintf("%s/%s", arch, b.name), func(t *testing.T) {
				factory := b.be
				if factory == nil {
					factory = cudaOrSkip(t)
				}
				be, err := factory(0)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					m    *Model
					want int64
				}{{m, want}, {wide, 2 * want}} {
					r := newRank(c.m, newLayout(cfg, 1, 0), be, nil, nil, profileVariant(kernels.Canonical), 1, 0)
					got, n, bias := rankWeightBytes(r)
					r.freeWeights()
					if err := be.Err(); err != nil {
						t.Fatal(err)
					}
					if got != c.want || n != wantN {
						t.Fatalf("%v weights: %d tensors hold %d bytes on %s, want %d tensors, %d bytes (their checkpoint size)",
							c.m.Embed.DType(), n, got, be.Name(), wantN, c.want)
					}
					if bias != 4*biasElems {
						t.Fatalf("%v weights: biases hold %d bytes on %s, want %d float32", c.m.Embed.DType(), bias, be.Name(), biasElems)
					}
				}
				gs, gt, gsd, gtd := sampleThenTrain(t, m, ps, mn, 1, kernels.Canonical, factory)
				ws, wt, wsd, wtd := sampleThenTrain(t, wide, ps, mn, 1, kernels.Canonical, factory)
				for _, o := range []struct {
					what       string
					a, b       *Output
					dirA, dirB string
				}{
					{"sampler, f16 vs widened", gs, ws, gsd, wsd}, {"trainer, f16 vs widened", gt, wt, gtd, wtd},
					{"sampler, vs the CPU's", gs, cs, gsd, csd}, {"trainer, vs the CPU's", gt, ct, gtd, ctd},
				} {
					if msg := sameOutputs(o.a, o.b); msg != "" {
						t.Errorf("%s: %s", o.what, msg)
					}
					if d := compare(t, cfg, o.dirA, o.dirB); d != nil {
						t.Errorf("%s: captures differ at %s seq %d pos %d elem %d", o.what, d.Op, d.Seq, d.Pos, d.Elem)
					}
				}
			})
		}
	}
}
