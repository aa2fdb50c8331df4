package nvls

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"bitalign/internal/testrank"
	"bitalign/kernels"
)

// runRanks runs f on every rank concurrently and returns the ranks' errors.
func runRanks(cs []Comm, f func(c Comm) error) []error {
	return testrank.Each(len(cs), func(r int) error { return f(cs[r]) })
}

// inputs gives each rank values of mixed magnitudes so that the summation order shows in the bits.
func inputs(n, L int, seed uint64) [][]float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	in := make([][]float32, n)
	for k := range in {
		in[k] = make([]float32, L)
		for i := range in[k] {
			in[k][i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-3)))
		}
	}
	return in
}

// treeRef is the documented order, written independently: recursive halving of the rank range.
func treeRef(v []float32) float32 {
	if len(v) == 1 {
		return v[0]
	}
	h := len(v) / 2
	return float32(treeRef(v[:h]) + treeRef(v[h:]))
}

// The transports add ranks with kernels.TreeSum: it must be T(0, n) for every group size nvls allows.
func TestTreeOrderExplicit(t *testing.T) {
	v := []float32{1e8, 1, -1e8, 1, 3, 1e-3, 7, -5}
	want := float32(float32(float32(v[0]+v[1])+float32(v[2]+v[3])) + float32(float32(v[4]+v[5])+float32(v[6]+v[7])))
	if got := kernels.TreeSum(append([]float32(nil), v...)); math.Float32bits(got) != math.Float32bits(want) {
		t.Fatalf("kernels.TreeSum = %g, want %g", got, want)
	}
	if want == float32(((((((v[0]+v[1])+v[2])+v[3])+v[4])+v[5])+v[6])+v[7]) {
		t.Fatalf("test values do not distinguish tree from sequential order")
	}
	for n := 1; n <= 64; n *= 2 {
		v := inputs(1, n, uint64(n))[0]
		if got, want := kernels.TreeSum(append([]float32(nil), v...)), treeRef(v); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n = %d: kernels.TreeSum = %g, T(0, n) = %g", n, got, want)
		}
	}
}

func TestAllReduceTree(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8, 16, 64} {
		for _, L := range []int{1, 3, 64, 1000} {
			cs, err := NewCPUGroup(n, WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			in := inputs(n, L, uint64(n*1000+L))
			bufs := make([][]float32, n)
			for r := range bufs {
				bufs[r] = append([]float32(nil), in[r]...)
			}
			testrank.NoErrors(t, runRanks(cs, func(c Comm) error { return c.AllReduce(bufs[c.Rank()]) }))
			vals := make([]float32, n)
			for i := 0; i < L; i++ {
				for r := range vals {
					vals[r] = in[r][i]
				}
				want := treeRef(vals)
				for r := 0; r < n; r++ {
					if math.Float32bits(bufs[r][i]) != math.Float32bits(want) {
						t.Fatalf("n=%d L=%d rank %d element %d: %g, want %g (tree order)", n, L, r, i, bufs[r][i], want)
					}
				}
			}
		}
	}
}

func TestReduceScatterIsAllReduceSlice(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		for _, ord := range []Order{Tree, Ring} {
			c := 13
			in := inputs(n, n*c, uint64(n))
			cs, _ := NewCPUGroup(n, WithOrder(ord))
			full := make([][]float32, n)
			outs := make([][]float32, n)
			testrank.NoErrors(t, runRanks(cs, func(cm Comm) error {
				r := cm.Rank()
				full[r] = append([]float32(nil), in[r]...)
				if err := cm.AllReduce(full[r]); err != nil {
					return err
				}
				outs[r] = make([]float32, c)
				return cm.ReduceScatter(outs[r], in[r])
			}))
			for r := 0; r < n; r++ {
				for i := 0; i < c; i++ {
					if math.Float32bits(outs[r][i]) != math.Float32bits(full[r][r*c+i]) {
						t.Fatalf("%v n=%d rank %d: reduce-scatter[%d] = %g, all-reduce slice %g", ord, n, r, i, outs[r][i], full[r][r*c+i])
					}
				}
			}
		}
	}
}

func TestAllGatherAndMax(t *testing.T) {
	n := 4
	cs, _ := NewCPUGroup(n)
	in := inputs(n, 5, 3)
	in[2][1] = float32(math.NaN())
	gath := make([][]float32, n)
	mx := make([][]float32, n)
	testrank.NoErrors(t, runRanks(cs, func(c Comm) error {
		r := c.Rank()
		gath[r] = make([]float32, n*5)
		if err := c.AllGather(gath[r], in[r]); err != nil {
			return err
		}
		mx[r] = append([]float32(nil), in[r]...)
		return c.AllReduceMax(mx[r])
	}))
	for r := 0; r < n; r++ {
		for k := 0; k < n; k++ {
			for i := 0; i < 5; i++ {
				if math.Float32bits(gath[r][k*5+i]) != math.Float32bits(in[k][i]) {
					t.Fatalf("all-gather rank %d slot %d element %d", r, k, i)
				}
			}
		}
		for i := 0; i < 5; i++ {
			want := float32(math.Inf(-1))
			for k := 0; k < n; k++ {
				want = max(want, in[k][i])
			}
			if i == 1 {
				if mx[r][i] == mx[r][i] {
					t.Fatalf("max with a NaN = %g, want NaN", mx[r][i])
				}
				continue
			}
			if mx[r][i] != want {
				t.Fatalf("max rank %d element %d = %g, want %g", r, i, mx[r][i], want)
			}
		}
	}
}

func TestTimeoutNamesMissingRank(t *testing.T) {
	cs, _ := NewCPUGroup(4, WithTimeout(100*time.Millisecond))
	start := time.Now()
	errs := runRanks(cs, func(c Comm) error {
		if c.Rank() == 2 {
			return nil // never arrives
		}
		return c.AllReduce(make([]float32, 8))
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("collective took %v: a missing rank must time out", d)
	}
	for r, err := range errs {
		if r == 2 {
			continue
		}
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("rank %d: got %v, want a TimeoutError", r, err)
		}
		if fmt.Sprint(te.Missing) != "[2]" {
			t.Fatalf("rank %d: missing %v, want [2] (%v)", r, te.Missing, err)
		}
	}
	// the group is broken afterwards: no hang on the next call
	if err := cs[0].AllReduce(make([]float32, 8)); err == nil {
		t.Fatal("a broken group accepted another collective")
	}
}

func TestCloseUnblocks(t *testing.T) {
	cs, _ := NewCPUGroup(2, WithTimeout(0))
	done := make(chan error)
	go func() { done <- cs[0].AllReduce(make([]float32, 4)) }()
	time.Sleep(20 * time.Millisecond)
	cs[1].(interface{ Close() error }).Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a waiting rank")
	}
}

func TestMismatchedCollectives(t *testing.T) {
	cs, _ := NewCPUGroup(2, WithTimeout(time.Second))
	errs := runRanks(cs, func(c Comm) error {
		if c.Rank() == 0 {
			return c.AllReduce(make([]float32, 4))
		}
		return c.AllReduce(make([]float32, 5))
	})
	if errs[0] == nil && errs[1] == nil {
		t.Fatal("ranks with different lengths were not reported")
	}
}

func TestBadSize(t *testing.T) {
	for _, n := range []int{0, 3, 6, 128} {
		if _, err := NewCPUGroup(n); err == nil {
			t.Errorf("NewCPUGroup(%d) accepted", n)
		}
	}
}

// TestRingDiffers: the ring order differs from the tree for n >= 4 (for n = 2, a+b = b+a).
func TestRingDiffers(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		L := 4096
		in := inputs(n, L, 11)
		res := map[Order][]float32{}
		for _, ord := range []Order{Tree, Ring} {
			cs, _ := NewCPUGroup(n, WithOrder(ord))
			bufs := make([][]float32, n)
			testrank.NoErrors(t, runRanks(cs, func(c Comm) error {
				bufs[c.Rank()] = append([]float32(nil), in[c.Rank()]...)
				return c.AllReduce(bufs[c.Rank()])
			}))
			for r := 1; r < n; r++ { // the ring still gives every rank the same bits (all-gather copies)
				for i := range bufs[r] {
					if math.Float32bits(bufs[r][i]) != math.Float32bits(bufs[0][i]) {
						t.Fatalf("%v n=%d: rank %d differs from rank 0 at %d", ord, n, r, i)
					}
				}
			}
			res[ord] = bufs[0]
		}
		diff := -1
		for i := range res[Tree] {
			if math.Float32bits(res[Tree][i]) != math.Float32bits(res[Ring][i]) {
				diff = i
				break
			}
		}
		switch {
		case n == 2 && diff >= 0:
			t.Fatalf("n=2: ring differs from tree at %d, but a two-term sum is commutative", diff)
		case n > 2 && diff < 0:
			t.Fatalf("n=%d: ring order gave the tree's bits on %d elements; the control must diverge", n, L)
		case n > 2:
			t.Logf("n=%d: ring differs from tree first at element %d", n, diff)
		}
	}
}
