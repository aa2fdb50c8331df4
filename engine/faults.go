package engine

import (
	"fmt"
	"strconv"
	"strings"

	"bitalign/kernels"
)

// Fault is one documented source of trainer/sampler mismatch that the demo can plant.
type Fault struct {
	Name        string // the --fault name
	Side        string // the side whose computation changes: "trainer" or "sampler"
	Where       string // the first divergent op, with L for the layer
	Layered     bool   // whether --layer chooses where it arises
	Description string
	// MoE: the fault needs a mixture-of-experts model (the demo then runs its MoE model, DemoMoEConfig).
	// FirstFlip is the demo's first routing flip (the first layers.L.mlp.experts to differ), "" for the others.
	MoE       bool
	FirstFlip string
}

// Faults lists the catalog in a fixed order.
func Faults() []Fault {
	return []Fault{
		{"split-k", SideSampler, "layers.0.attn.o_proj", false,
			"the sampler's matmuls use vendor-style kernels whose split-K is chosen from M (the rows decoded together): every projection's float32 sum changes; in the demo the bf16 rounding hides it in q/k/v_proj and the first bits to differ are layer 0's o_proj", false, ""},
		{"ring-allreduce", SideTrainer, "layers.L.attn.o_proj", true,
			"the trainer's row-parallel all-reduces in layer L run NCCL-style: the TP partials travel as bf16 and are summed in ring order instead of the fixed float32 tree (the demo trainer runs at TP 4)", false, ""},
		{"fusion", SideSampler, "layers.L.mlp_norm", true,
			"the sampler fuses layer L's residual add with the post-attention RMSNorm and normalises the float32 sum before it is rounded to bf16", false, ""},
		{"fast-exp", SideSampler, "layers.L.attn.sdpa", true,
			"the sampler's attention in layer L uses an approximate exp in the softmax", false, ""},
		{"rng-slot", SideSampler, "sample", false,
			"the sampler keys its Gumbel noise by batch slot instead of (sequence, position), so a sequence's draw depends on where it sits in the batch", false, ""},
		{"stale-weights", SideSampler, "layers.L.attn_norm", true,
			"the sampler still holds the previous step's weights for layer L; the first op of that layer reads them", false, ""},
		{"router-split-k", SideTrainer, "layers.0.mlp.router", false,
			"the trainer's MoE router runs as a vendor GEMM: split-K chosen from M (the tokens of the batch) and the logits returned in bf16 (nn.Linear in the model dtype) instead of float32; logits move by up to half a bf16 ulp, and tokens whose k-th and (k+1)-th experts are that close change experts (the demo runs its MoE model)",
			true, demoFirstFlip},
	}
}

// FaultByName finds a fault in the catalog.
func FaultByName(name string) (Fault, error) {
	for _, f := range Faults() {
		if f.Name == name {
			return f, nil
		}
	}
	names := ""
	for i, f := range Faults() {
		if i > 0 {
			names += ", "
		}
		names += f.Name
	}
	return Fault{}, fmt.Errorf("engine: unknown fault %q (known: %s)", name, names)
}

// FirstDivergentOp is where the fault's first divergence is documented to be, for layer.
func (f Fault) FirstDivergentOp(layer int) string {
	if !f.Layered {
		return f.Where
	}
	return strings.Replace(f.Where, "layers.L.", "layers."+strconv.Itoa(layer)+".", 1)
}

// runVariant turns a run's profile and fault into kernel choices for one side. stale is the layer whose weights
// are stale (-1: none).
func runVariant(side string, o RunOptions, cfg Config) (v variant, stale int, err error) {
	layers := cfg.Layers
	v = profileVariant(o.Profile)
	stale = -1
	if err := CheckProfile(o.Profile, cfg, ""); err != nil {
		return v, stale, err
	}
	if o.Fault == "" {
		return v, stale, nil
	}
	f, err := FaultByName(o.Fault)
	if err != nil {
		return v, stale, err
	}
	if f.Layered && (o.FaultLayer < 0 || o.FaultLayer >= layers) {
		return v, stale, fmt.Errorf("engine: fault %s: layer %d outside [0, %d)", f.Name, o.FaultLayer, layers)
	}
	if f.MoE && cfg.Experts == 0 {
		return v, stale, fmt.Errorf("engine: fault %s needs a mixture-of-experts model; this %s model has none", f.Name, cfg.Architecture)
	}
	if f.Side != side {
		return v, stale, nil
	}
	switch f.Name {
	case "split-k":
		v.matmul, v.router, v.experts = kernels.Standard, kernels.Standard, kernels.Standard
	case "ring-allreduce":
		v.ringLayer = o.FaultLayer
	case "fusion":
		v.fusionLayer = o.FaultLayer
	case "fast-exp":
		v.fastExpLayer = o.FaultLayer
	case "rng-slot":
		v.rngSlot = true
	case "router-split-k":
		v.router, v.routerModelDType = kernels.Standard, true
	case "stale-weights":
		stale = o.FaultLayer
	}
	return v, stale, nil
}

// withStaleLayer returns a copy of m whose layer l holds "the previous step's" weights: every value moved by one
// deterministic optimizer-like step large enough to change its bf16 bits.
func (m *Model) withStaleLayer(l int) *Model {
	c := *m
	c.Layers = append([]Layer(nil), m.Layers...)
	L := c.Layers[l]
	rng := splitmix64(0x5ca1ab1e + uint64(l))
	prev := func(w W) W {
		if w.IsZero() {
			return w
		}
		out := make([]float32, w.Len())
		w.Widen(out, 0)
		for i, x := range out {
			step := float32(1.0 / 64) // 2^-6 relative: larger than a bf16 ulp (2^-8), so the bits change
			if rng.next()&1 == 0 {
				step = -step
			}
			out[i] = x * (1 + step)
		}
		return kernels.RoundWeights(kdt(m.Config.DType), out) // the model dtype's rounding
	}
	L.AttnNorm, L.MLPNorm = prev(L.AttnNorm), prev(L.MLPNorm)
	L.Q, L.K, L.V, L.O = prev(L.Q), prev(L.K), prev(L.V), prev(L.O)
	L.QBias, L.KBias, L.VBias, L.OB = prev(L.QBias), prev(L.KBias), prev(L.VBias), prev(L.OB)
	L.QNorm, L.KNorm = prev(L.QNorm), prev(L.KNorm)
	L.Gate, L.Up, L.Down = prev(L.Gate), prev(L.Up), prev(L.Down)
	L.Router, L.SharedGate = prev(L.Router), prev(L.SharedGate)
	L.Shared = Expert{Gate: prev(L.Shared.Gate), Up: prev(L.Shared.Up), Down: prev(L.Shared.Down)}
	if L.Experts != nil {
		L.Experts = append([]Expert(nil), L.Experts...)
		for e, x := range L.Experts {
			L.Experts[e] = Expert{Gate: prev(x.Gate), Up: prev(x.Up), Down: prev(x.Down)}
		}
	}
	c.Layers[l] = L
	return &c
}
