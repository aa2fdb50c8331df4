package engine

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// tcTinyConfig is tinyConfig for the tc profile: bf16 (tc serves bf16 models only) with a head dim of 16 (a
// multiple of the k-step), hidden 80 (column-parallel chains of 5 k-steps: K not a multiple of 64) and an
// intermediate of 192 (the row-parallel down_proj's segments are 24 wide: k-steps straddle segment bounds, and
// at TP 8 a rank holds 24 columns).
func tcTinyConfig(arch string) Config {
	c := tinyConfig(arch, capture.BF16)
	c.Hidden, c.HeadDim, c.Intermediate = 80, 16, 192
	if c.Experts > 0 {
		c.MoEIntermediate = 48
	}
	if c.SharedIntermediate > 0 {
		c.SharedIntermediate = 80
	}
	return c
}

// tcConfigs are the tc matrix's models: dense Llama, Qwen2 (q/k/v bias), Qwen3 (q/k norms, attention and
// o_proj bias), Qwen3-MoE and Qwen2-MoE (router, experts, shared expert), all bf16.
func tcConfigs() []Config {
	qwen3 := tcTinyConfig(ArchQwen3)
	qwen3.QKVBias, qwen3.OBias = true, true
	return []Config{tcTinyConfig(ArchLlama), tcTinyConfig(ArchQwen2), qwen3, tcTinyConfig(ArchQwen3MoE), tcTinyConfig(ArchQwen2MoE)}
}

// TestInvarianceTC: with the tc profile (tensor-core matmuls and attention products, emulated bit for bit on
// the CPU: docs/arithmetic.md §18) every op, log-probability and sample is bitwise identical across batch 1..8,
// TP 1/2/4/8 (ranks sharing a backend), prefill vs decode, continuous vs static batching and run vs run, as
// with canonical; the first divergence, if any, is reported with its element and ULP distance.
func TestInvarianceTC(t *testing.T) {
	cfgs := tcConfigs()
	if testing.Short() {
		cfgs = cfgs[:1]
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Architecture, func(t *testing.T) { runMatrix(t, cfg, kernels.TC) })
	}
}

// TestInvarianceTCStandard: the tc matrix's model with the standard profile (vendor-like kernels) fails the
// matrix: the control that shows the tc model and its inputs can reveal a variance.
func TestInvarianceTCStandard(t *testing.T) {
	runMatrix(t, tcTinyConfig(ArchLlama), kernels.Standard)
}

// TestTCRunsTensorCores: the tc profile really changes the matmuls and attention (its captures differ from
// canonical's at the first projection, and its attention from canonical attention on the same inputs), and
// only those: embed and attn_norm stay canonical's bits.
func TestTCRunsTensorCores(t *testing.T) {
	cfg := tcTinyConfig(ArchLlama)
	m := NewRandom(cfg, 5)
	ps, _ := tinyPrompts(cfg)
	root := t.TempDir()
	dirs := map[kernels.Profile]string{}
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.TC} {
		dirs[p] = filepath.Join(root, p.String())
		if _, err := m.Train(context.Background(), ps, TrainOptions{RunOptions: RunOptions{TP: 1, Profile: p, Seed: 9, Step: 3,
			CaptureDir: dirs[p]}}); err != nil {
			t.Fatal(err)
		}
	}
	d := compare(t, cfg, dirs[kernels.Canonical], dirs[kernels.TC])
	if d == nil {
		t.Fatal("tc and canonical captures are identical: the tc kernels did not run")
	}
	if d.Index < OpIndex(cfg, LayerOp(0, opQProj)) {
		t.Fatalf("tc vs canonical: first divergence %v, before the first matmul (embed and attn_norm are canonical ops)", d)
	}
	t.Logf("tc vs canonical: first divergence %v", d)
	if v := profileVariant(kernels.TC); v.norm != kernels.Canonical || v.softmax != kernels.Canonical || v.ring ||
		v.matmul != kernels.TC || v.attn != kernels.TC || v.router != kernels.TC || v.experts != kernels.TC {
		t.Fatalf("tc's variant %+v: want tc matmuls and attention, canonical norms and softmax, the tree all-reduce", v)
	}

	// the backend's matmuls: Matmul is the column-parallel chain, MatmulPartial the rank's segment subtree
	const M, K, N = 3, 200, 6
	x, w := tcRand(M*K, 4), tcRand(N*K, 5)
	be := NewCPU()
	buf := func(x []float32) Buf { y := be.Alloc(len(x)); be.Upload(y, x); return y }
	wb := be.UploadWeights(kernels.RoundWeights(kernels.BF16, w))
	for _, c := range []struct {
		name string
		run  func(p kernels.Profile, out Buf)
		want func(out []float32) error
	}{
		{"Matmul", func(p kernels.Profile, out Buf) { be.Matmul(p, out, buf(x), wb, nil, M, K, N, kernels.F32) },
			func(out []float32) error {
				return kernels.MatmulTC(kernels.ColumnParallel, kernels.F32, out, x, w, nil, M, K, N)
			}},
		{"MatmulPartial", func(p kernels.Profile, out Buf) { be.MatmulPartial(p, out, buf(x), wb, M, K, N, 0, 1) },
			func(out []float32) error { return kernels.MatmulTCPartial(out, x, w, M, K, N, 1) }},
	} {
		got := map[kernels.Profile][]float32{}
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.TC} {
			out := be.Alloc(M * N)
			c.run(p, out)
			got[p] = make([]float32, M*N)
			if err := be.Download(got[p], out); err != nil {
				t.Fatal(err)
			}
		}
		want := make([]float32, M*N)
		if err := c.want(want); err != nil {
			t.Fatal(err)
		}
		if i, ulp, differ := kernels.FirstDiff(got[kernels.TC], want); differ {
			t.Errorf("%s with tc differs from the kernels' tc matmul at %d, %d ULP", c.name, i, ulp)
		}
		if _, _, differ := kernels.FirstDiff(got[kernels.Canonical], got[kernels.TC]); !differ {
			t.Errorf("%s: tc equals canonical bitwise at K = %d (float32 out): the tc kernel did not run", c.name, K)
		}
	}

	// attention alone, from the same bf16 q, k, v: the tc products differ from canonical's FMA chains
	const n, nh, nkv, hd = 40, 4, 2, 32
	q, k, v := tcRand(n*nh*hd, 1), tcRand(n*nkv*hd, 2), tcRand(n*nkv*hd, 3)
	outs := map[kernels.Profile][]float32{}
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.TC} {
		be := NewCPU()
		b := func(x []float32) Buf { y := be.Alloc(len(x)); be.Upload(y, x); return y }
		out := be.Alloc(n * nh * hd)
		be.Attention(p, out, b(q), b(k), b(v), 0, n, nh, nkv, hd, kernels.BF16, AttnOptions{})
		outs[p] = make([]float32, n*nh*hd)
		if err := be.Download(outs[p], out); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, differ := kernels.FirstDiff(outs[kernels.Canonical], outs[kernels.TC]); !differ {
		t.Fatal("tc attention equals canonical attention bitwise: AttentionTC did not run")
	}
}

// tcRand is n bf16 values of a fixed pseudo-random sequence.
func tcRand(n int, seed uint64) []float32 {
	r := splitmix64(seed)
	out := make([]float32, n)
	for i := range out {
		out[i] = kernels.RoundBF16(float32(int64(r.next()%2001)-1000) / 1000)
	}
	return out
}

// TestTCRefusesOtherDTypes: the tc profile serves bf16 models only (tc.2) with head dims a multiple of 16 (tc.3):
// an f32 or f16 model, or a head dim of 8, is refused by every mode before a weight is placed, with the reason.
func TestTCRefusesOtherDTypes(t *testing.T) {
	ps, mn := tinyPrompts(tinyConfig(ArchLlama, capture.BF16))
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{tcTinyConfigDType(capture.F32), "serves bf16 models only, this one is f32"},
		{tcTinyConfigDType(capture.F16), "serves bf16 models only, this one is f16"},
		{tinyConfig(ArchLlama, capture.BF16), "head dim that is a multiple of 16, this model's is 8"},
	} {
		m := NewRandom(c.cfg, 1)
		ro := RunOptions{TP: 1, Profile: kernels.TC, Seed: 1}
		_, errT := m.Train(context.Background(), ps, TrainOptions{RunOptions: ro})
		_, errS := m.Sample(context.Background(), ps, SampleOptions{RunOptions: ro, Slots: 2, MaxNew: mn})
		_, errR := m.RunOp(OpEmbed, OpInputs{Pos: 0, N: 1}, WithProfile(kernels.TC))
		for name, err := range map[string]error{"Train": errT, "Sample": errS, "RunOp": errR} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s of a %v model (head dim %d) with tc: %v, want %q", name, c.cfg.DType, c.cfg.HeadDim, err, c.want)
			}
		}
	}
	if err := CheckProfile(kernels.TC, tcTinyConfigDType(capture.F32), "/ckpt"); err == nil || !strings.Contains(err.Error(), "/ckpt/config.json") {
		t.Errorf("CheckProfile with a checkpoint: %v, want the error to name /ckpt/config.json", err)
	}
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard, kernels.TC} {
		if err := CheckProfile(p, tcTinyConfig(ArchLlama), ""); err != nil {
			t.Errorf("%v on a bf16 model: %v", p, err)
		}
	}
}

func tcTinyConfigDType(dt capture.DType) Config {
	c := tcTinyConfig(ArchLlama)
	c.DType = dt
	return c
}

// noTCBackend is the CPU backend saying, as the CUDA backend does without the tc PTX, that it cannot run tc.
type noTCBackend struct{ *CPU }

func (noTCBackend) ServesProfile(p kernels.Profile) error {
	if p == kernels.TC {
		return errors.New("engine: test: --profile tc needs the tc kernels")
	}
	return nil
}

// TestTCBackendRefuses: a backend that cannot run tc (the CUDA backend without the tc PTX modules) is refused
// by Train, Sample and RunOp before a weight is placed, with its reason; other profiles run on it.
func TestTCBackendRefuses(t *testing.T) {
	cfg := tcTinyConfig(ArchLlama)
	m := NewRandom(cfg, 1)
	ps, mn := tinyPrompts(cfg)
	be := func(int) (Backend, error) { return noTCBackend{NewCPU()}, nil }
	for _, p := range []kernels.Profile{kernels.TC, kernels.Canonical} {
		ro := RunOptions{TP: 2, Profile: p, Seed: 1, Backend: be}
		_, errT := m.Train(context.Background(), ps, TrainOptions{RunOptions: ro})
		_, errS := m.Sample(context.Background(), ps, SampleOptions{RunOptions: ro, Slots: 2, MaxNew: mn})
		for name, err := range map[string]error{"Train": errT, "Sample": errS} {
			if p == kernels.TC && (err == nil || !strings.Contains(err.Error(), "needs the tc kernels")) {
				t.Errorf("%s with tc on a backend without it: %v, want its reason", name, err)
			}
			if p != kernels.TC && err != nil {
				t.Errorf("%s with %v: %v", name, p, err)
			}
		}
	}
	if _, err := m.RunOp(OpEmbed, OpInputs{Pos: 0, N: 1}, WithProfile(kernels.TC), WithBackend(noTCBackend{NewCPU()})); err == nil ||
		!strings.Contains(err.Error(), "needs the tc kernels") {
		t.Errorf("RunOp with tc on a backend without it: %v, want its reason", err)
	}
}
