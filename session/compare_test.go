package session

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"bitalign/capture"
)

// reference is the obvious element-by-element comparison the chunk comparator must agree with.
type reference struct {
	mismatched, nanA, nanB, infA, infB, nanNumber int64
	hist                                          [65]uint64
	maxULP                                        uint64
	maxAt, firstAt                                int64
	maxAbs, maxRel, sumAbs                        float64
}

// compareReference compares element by element. Integer and bool distances are not kept (the report gives
// none); an f32 pair whose values are all bf16 values is measured with bf16's own comparison of the high halves.
func compareReference(f *format, a, b []byte) reference {
	r := reference{maxAt: -1, firstAt: -1}
	narrow := f.dt == capture.F32
	for i := 0; i < len(a)/f.size; i++ {
		narrow = narrow && (f.load(a, i)|f.load(b, i))&0xffff == 0
	}
	for i := 0; i < len(a)/f.size; i++ {
		x, y := f.load(a, i), f.load(b, i)
		for _, v := range []struct {
			x        uint64
			nan, inf *int64
		}{{x, &r.nanA, &r.infA}, {y, &r.nanB, &r.infB}} {
			if f.isNaN(v.x) {
				*v.nan++
			} else if f.isInf(v.x) {
				*v.inf++
			}
		}
		cls, d := f.compare(x, y)
		if narrow {
			cls, d = formats[capture.BF16].compare(x>>16, y>>16)
		}
		if cls == ClassEqual {
			continue
		}
		r.mismatched++
		if r.firstAt < 0 {
			r.firstAt = int64(i)
		}
		if cls == ClassNaNNumber {
			r.nanNumber++
			continue
		}
		if f.kind != kindFloat {
			continue
		}
		r.hist[bucket(d)]++
		if d > r.maxULP {
			r.maxULP, r.maxAt = d, int64(i)
		}
		va, vb := f.value(x), f.value(y)
		if cls == ClassNumeric && !math.IsInf(va, 0) && !math.IsInf(vb, 0) {
			ad := math.Abs(va - vb)
			r.sumAbs += ad
			r.maxAbs = max(r.maxAbs, ad)
			if den := max(math.Abs(va), math.Abs(vb)); den > 0 {
				r.maxRel = max(r.maxRel, ad/den)
			}
		}
	}
	return r
}

// plant fills a with random values and b with a copy in which about rate of the elements differ, some of
// them by special values (NaN, ±Inf, −0).
func plant(r *rand.Rand, f *format, n int, rate float64) (a, b []byte) {
	a = make([]byte, n*f.size)
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	// mostly ordinary values: clear the top exponent bit of floats so specials are planted, not random
	if f.kind == kindFloat {
		for i := 0; i < n; i++ {
			x := f.load(a, i) &^ (f.sign >> 1)
			putElem(f, a, i, x)
		}
	}
	b = append([]byte(nil), a...)
	for i := 0; i < n; i++ {
		if r.Float64() >= rate {
			continue
		}
		x := f.load(b, i)
		switch r.IntN(6) {
		case 0:
			x ^= f.sign // sign flip
		case 1:
			x = f.width &^ f.sign // NaN (or max pattern)
		case 2:
			if f.kind == kindFloat && !f.noInf {
				x = (1<<f.expBits - 1) << f.mantBits // +Inf
			}
		default:
			x ^= 1 << r.IntN(8*f.size) // a single bit
		}
		putElem(f, b, i, x)
		if r.IntN(10) == 0 { // the same special on A's side too
			putElem(f, a, i, x)
		}
	}
	return a, b
}

func putElem(f *format, data []byte, i int, x uint64) {
	for k := 0; k < f.size; k++ {
		data[i*f.size+k] = byte(x >> (8 * k))
	}
}

// widen turns bf16 data into f32 data holding the same values (low 16 bits zero).
func widen(bf []byte) []byte {
	out := make([]byte, 2*len(bf))
	for i := 0; i < len(bf)/2; i++ {
		out[4*i+2], out[4*i+3] = bf[2*i], bf[2*i+1]
	}
	return out
}

func TestChunkComparatorMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// "bf16-in-f32": bf16 values widened to f32, measured in bf16 ULPs
	for _, dt := range append(capture.DTypes(), capture.InvalidDType) {
		f := formats[dt]
		widened := dt == capture.InvalidDType
		if widened {
			f = formats[capture.F32]
		}
		for _, tc := range []struct {
			n    int
			rate float64
			same bool // first half identical (specials included): the bytes.Equal fast path
		}{{1, 1, false}, {7, 0.5, false}, {1000, 0, false}, {1000, 0.01, false}, {100003, 0.001, false},
			{100003, 0.3, false}, {300007, 0.05, true}, {1<<20 + 5, 0.001, false}} {
			var a, b []byte
			if widened {
				a, b = plant(r, formats[capture.BF16], tc.n, tc.rate)
				a, b = widen(a), widen(b)
			} else {
				a, b = plant(r, f, tc.n, tc.rate)
			}
			if tc.same {
				copy(a[:len(a)/2], b)
			}
			want := compareReference(f, a, b)
			rowLen := int64(1)
			if tc.n%7 == 0 {
				rowLen = 7
			}
			if tc.n > 1<<20 { // one huge row (a weight): the map divides instead of using a table
				rowLen = int64(tc.n)
			}
			p := piece{step: 0, seq: 0, pos: 10, rows: int64(tc.n) / rowLen, rowLen: rowLen, a: a, b: b}
			o := newOpWork(f, []piece{p}, 8, 8)
			accs := []*acc{{}, {}, {}}
			w, err := o.run(context.Background(), accs, nil)
			if err != nil {
				t.Fatal(err)
			}
			var st OpStat
			st.Elements = int64(tc.n)
			fill(&st, o, w, f)
			name := dt.String()
			wantULPDType := map[kind]string{kindFloat: dt.String()}[f.kind]
			if widened {
				name, wantULPDType = "bf16-in-f32", "bf16"
			}
			if st.Mismatched > 0 && st.ULPDType != wantULPDType {
				t.Errorf("%s n=%d: ULPs in %q, want %q", name, tc.n, st.ULPDType, wantULPDType)
			}
			if st.Mismatched != want.mismatched || st.NaNNumber != want.nanNumber {
				t.Errorf("%s n=%d: mismatched %d (nan-num %d), want %d (%d)", name, tc.n, st.Mismatched, st.NaNNumber, want.mismatched, want.nanNumber)
			}
			if st.NaNA != want.nanA || st.NaNB != want.nanB || st.InfA != want.infA || st.InfB != want.infB {
				t.Errorf("%s n=%d: nan/inf %d %d %d %d, want %d %d %d %d", name, tc.n, st.NaNA, st.NaNB, st.InfA, st.InfB, want.nanA, want.nanB, want.infA, want.infB)
			}
			want.hist[0] = uint64(int64(tc.n) - want.mismatched)
			if st.Hist != want.hist {
				t.Errorf("%s n=%d: hist differs", name, tc.n)
			}
			if st.MaxULP != want.maxULP {
				t.Errorf("%s n=%d: max ULP %d, want %d", name, tc.n, st.MaxULP, want.maxULP)
			}
			if want.maxAt >= 0 && (st.MaxAt == nil || (st.MaxAt.Pos-10)*rowLen+st.MaxAt.Col != want.maxAt) {
				t.Errorf("%s n=%d: max at %+v, want element %d", name, tc.n, st.MaxAt, want.maxAt)
			}
			if want.firstAt >= 0 && (st.FirstAt == nil || (st.FirstAt.Pos-10)*rowLen+st.FirstAt.Col != want.firstAt) {
				t.Errorf("%s n=%d: first at %+v, want element %d", name, tc.n, st.FirstAt, want.firstAt)
			}
			if want.firstAt < 0 && st.FirstAt != nil {
				t.Errorf("%s n=%d: first at %+v on identical data", name, tc.n, st.FirstAt)
			}
			if st.MaxAbs != want.maxAbs || st.MaxRel != want.maxRel {
				t.Errorf("%s n=%d: max abs/rel %g %g, want %g %g", name, tc.n, st.MaxAbs, st.MaxRel, want.maxAbs, want.maxRel)
			}
			if m := want.sumAbs / float64(tc.n); math.Abs(st.MeanAbs-m) > 1e-9*math.Abs(m) {
				t.Errorf("%s n=%d: mean abs %g, want %g", name, tc.n, st.MeanAbs, m)
			}
		}
	}
}

// The merged result must not depend on the number of workers (scheduling).
func TestChunkComparatorDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	f := formats[capture.BF16]
	a, b := plant(r, f, 1<<20, 0.01)
	var ref *OpStat
	for _, nw := range []int{1, 2, 3, 8} {
		o := newOpWork(f, []piece{{rows: 1 << 10, rowLen: 1 << 10, a: a, b: b}}, 16, 16)
		accs := make([]*acc, nw)
		for i := range accs {
			accs[i] = &acc{}
		}
		w, err := o.run(context.Background(), accs, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := &OpStat{Elements: 1 << 20}
		fill(st, o, w, f)
		if ref == nil {
			ref = st
			continue
		}
		if st.MeanAbs != ref.MeanAbs || st.Hist != ref.Hist {
			t.Fatalf("workers=%d: result differs", nw)
		}
		if st.MaxAt.Pos != ref.MaxAt.Pos || st.MaxAt.Col != ref.MaxAt.Col || string(st.Map.Cells) != string(ref.Map.Cells) {
			t.Fatalf("workers=%d: max/map differs", nw)
		}
	}
}

// TestRecordFiniteMatchesRecord: the comparator with recordFinite (words without NaN or Inf) gives the very
// OpStat (every field, the map, Σ|a−b| per job bit for bit, the rows' mismatch bits) that record alone gives,
// for every dtype, bf16 in f32, mismatch rates up to every element, with and without planted specials.
func TestRecordFiniteMatchesRecord(t *testing.T) {
	defer func() { recordFast = true }()
	r := rand.New(rand.NewPCG(15, 15))
	run := func(f *format, a, b []byte, rowLen int64, fast bool) (OpStat, []float64, []uint64) {
		recordFast = fast
		n := int64(len(a) / f.size)
		o := newOpWork(f, []piece{{pos: 3, rows: n / rowLen, rowLen: rowLen, a: a, b: b}}, 8, 16)
		w, err := o.run(context.Background(), []*acc{{}, {}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := OpStat{Elements: n}
		fill(&st, o, w, f)
		return st, o.sums, o.pieces[0].rowMism
	}
	for _, dt := range append(capture.DTypes(), capture.InvalidDType) {
		f := formats[dt]
		name := dt.String()
		if dt == capture.InvalidDType {
			f, name = formats[capture.F32], "bf16-in-f32"
		}
		for _, tc := range []struct {
			n        int
			rate     float64
			specials bool
		}{{7 * 1000, 0.5, false}, {7 * 1000, 1, false}, {7 * 30011, 0.3, true}, {7 * 5000, 0.02, true}} {
			var a, b []byte
			if dt == capture.InvalidDType {
				a, b = plant(r, formats[capture.BF16], tc.n, tc.rate)
				a, b = widen(a), widen(b)
			} else {
				a, b = plant(r, f, tc.n, tc.rate)
			}
			if !tc.specials && f.kind == kindFloat { // every differing element a finite 1-bit change
				copy(b, a)
				for i := 0; i < tc.n; i++ {
					if r.Float64() < tc.rate {
						putElem(f, b, i, f.load(a, i)^1<<r.IntN(int(f.mantBits)+1))
					}
				}
				// ±0 against ±0 and subnormals of both signs (ordered keys across the sign)
				tiny := []uint64{0, f.sign, 1, f.sign | 1, 3, f.sign | 2}
				for i := 0; i < tc.n; i += 1 + r.IntN(9) {
					putElem(f, a, i, tiny[r.IntN(len(tiny))])
					putElem(f, b, i, tiny[r.IntN(len(tiny))])
				}
			}
			// rows of 7 (words straddle rows: the per-lane path) and of n/7 (long rows: finiteRun's path)
			for _, rowLen := range []int64{7, int64(tc.n / 7)} {
				fastSt, fastSums, fastRows := run(f, a, b, rowLen, true)
				slowSt, slowSums, slowRows := run(f, a, b, rowLen, false)
				if fastSt.Mismatched == 0 {
					t.Fatalf("%s n=%d: nothing differs", name, tc.n)
				}
				if !reflect.DeepEqual(fastSt, slowSt) {
					t.Errorf("%s n=%d rows of %d, rate %g: OpStat differs:\nfast %+v\nslow %+v", name, tc.n, rowLen, tc.rate, fastSt, slowSt)
				}
				for i := range fastSums {
					if math.Float64bits(fastSums[i]) != math.Float64bits(slowSums[i]) {
						t.Fatalf("%s n=%d rows of %d: job %d: Σ|a−b| %v, record alone %v", name, tc.n, rowLen, i, fastSums[i], slowSums[i])
					}
				}
				if !slices.Equal(fastRows, slowRows) {
					t.Errorf("%s n=%d rows of %d: mismatched rows differ", name, tc.n, rowLen)
				}
			}
		}
	}
}
