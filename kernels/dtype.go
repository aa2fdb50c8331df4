package kernels

import (
	"fmt"
	"math"
	"strings"

	"bitalign/internal/fp"
)

// Profile selects the arithmetic: Canonical is the invariant contract of docs/arithmetic.md; Standard mimics
// vendor libraries (split-K from M, blocking from the batch, prefill/decode-specific attention) and is
// expected to differ by a few ULP between batch sizes, TP degrees and prefill/decode.
type Profile int

const (
	Canonical Profile = iota // docs/arithmetic.md §1–12
	Standard                 // docs/arithmetic.md §13
	TC                       // docs/arithmetic.md §18: tensor-core matmuls and attention products, canonical elsewhere
)

func (p Profile) String() string {
	switch p {
	case Canonical:
		return "canonical"
	case Standard:
		return "standard"
	case TC:
		return "tc"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// Profiles are the profiles ParseProfile accepts, in the order a flag lists them.
var Profiles = []Profile{Canonical, Standard, TC}

// ParseProfile parses "canonical", "standard" or "tc".
func ParseProfile(s string) (Profile, error) {
	for _, p := range Profiles {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	names := make([]string, len(Profiles))
	for i, p := range Profiles {
		names[i] = p.String()
	}
	return 0, fmt.Errorf("kernels: unknown kernel profile %q (want %s)", s, strings.Join(names, ", "))
}

// The profile's rules: which ops it changes and which models it serves, in one place (docs/arithmetic.md §13,
// §18). An engine asks these, never the profile's name. Every profile runs the matmuls (projections, LM head,
// MoE router and experts) and attention with itself: for TC a backend's column-parallel Matmul is
// MatmulTC(ColumnParallel), its row-parallel MatmulPartial is MatmulTCPartial (tc.2), Attention is AttentionTC.

// Others is the profile of every op the profile does not change: RMSNorm, RoPE, the log-softmax, the
// element-wise ops, sampling. TC changes only the matmuls and attention's two products (§18), so its others are
// canonical's.
func (p Profile) Others() Profile {
	if p == TC {
		return Canonical
	}
	return p
}

// RingAllReduce reports whether the profile's all-reduces run in ring order (standard, the control group); the
// others finish the segment tree with the canonical pairwise tree (§12; tc.2 keeps it).
func (p Profile) RingAllReduce() bool { return p == Standard }

// Serves returns nil when p can run a model whose op outputs round to dt (the checkpoint's dtype) and whose
// attention head dim is headDim, else why not. TC serves bf16 models only (only the bf16 MMA was measured,
// tc.2) with head dims a multiple of the k-step (tc.3).
func (p Profile) Serves(dt DType, headDim int) error {
	if p != TC {
		return nil
	}
	if dt != BF16 {
		return fmt.Errorf("the tc profile serves bf16 models only, this one is %v (docs/arithmetic.md tc.2: only the bf16 MMA was measured)", dt)
	}
	if headDim%TCStepK != 0 {
		return fmt.Errorf("the tc profile needs a head dim that is a multiple of %d, this model's is %d (docs/arithmetic.md tc.3)", TCStepK, headDim)
	}
	return nil
}

// DType is the dtype an op rounds its output to (docs/arithmetic.md §1): the one dtype enum,
// bitalign/internal/fp's, whose Round and RoundSlice methods are the output rounding. Ops use F32, BF16 and
// F16.
type DType = fp.DType

const (
	F32  = fp.F32  // no rounding (NaN canonicalised): float32 checkpoints, logits, log-probabilities
	BF16 = fp.BF16 // round to nearest even to bfloat16
	F16  = fp.F16  // round to nearest even to IEEE half
)

// CanonicalNaN is the one NaN every op outputs (quiet, positive): op outputs compare bitwise.
const CanonicalNaN = fp.CanonicalNaN

// RoundBF16 rounds x to the nearest bfloat16 (ties to even), returned as float32; NaN becomes CanonicalNaN.
func RoundBF16(x float32) float32 { return fp.RoundBF16(x) }

// ToBF16Bits returns the bfloat16 bits nearest x (ties to even; exact when x is already bf16).
func ToBF16Bits(x float32) uint16 { return fp.F32ToBF16(x) }

// FromBF16Bits widens bfloat16 bits to float32 (exact).
func FromBF16Bits(b uint16) float32 { return fp.BF16ToF32(b) }

// RoundF16 rounds x to the nearest IEEE half (ties to even, subnormals kept), returned as float32; NaN
// becomes CanonicalNaN.
func RoundF16(x float32) float32 { return fp.RoundF16(x) }

// ToF16Bits returns the IEEE half bits nearest x (ties to even; exact when x is already a half).
func ToF16Bits(x float32) uint16 { return fp.F32ToF16(x) }

// FromF16Bits widens IEEE half bits to float32 (exact).
func FromF16Bits(b uint16) float32 { return fp.F16ToF32(b) }

// ULP is the distance between a and b on float32's ordered integer line (fp.Format.Compare: +0 and −0 are
// 1 apart, a NaN against a non-NaN is fp.ULPNaNNumber, two NaNs with different bits a distance below it).
func ULP(a, b float32) uint64 {
	return fp.FormatOf(fp.F32).ULP(uint64(math.Float32bits(a)), uint64(math.Float32bits(b)))
}

// FirstDiff compares a and b bitwise. It returns the first index whose bits differ and their ULP distance,
// ok = false when the slices are bitwise identical. A length difference is reported at index
// min(len(a), len(b)) with ulp = MaxUint64.
func FirstDiff(a, b []float32) (idx int, ulp uint64, ok bool) {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, ULP(a[i], b[i]), true
		}
	}
	if len(a) != len(b) {
		return n, math.MaxUint64, true
	}
	return 0, 0, false
}
