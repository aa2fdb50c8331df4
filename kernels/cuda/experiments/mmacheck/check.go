package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	"bitalign/kernels"
)

// A layout says which dot products a bulk output file holds: unit u of the file is outs float32 outputs made
// from blocks [u·blocks, (u+1)·blocks); want computes output e of a unit from those blocks and says which
// regime to count it under.
type layout struct {
	what   string
	blocks int
	outs   int
	want   func(bs []block, e int) (got uint32, regime string, in string)
}

// layoutOf is the layout of mma_probe's BULK file path by its suffix.
func layoutOf(path string) layout {
	ab := func(b *block, m, n int) string {
		return fmt.Sprintf("a %04X b %04X c %08X", b.A[m], b.B[n], b.C[m][n])
	}
	switch {
	case strings.HasSuffix(path, ".wg256"): // wgmma m64n256k16: (m, 8i+n) = A(32u)[m]·B(32u+i)[n] + C(32u+i)[m][n]
		return layout{"wgmma m64n256k16, one k-step", 32, 64 * 256, func(bs []block, e int) (uint32, string, string) {
			m, col := e/256, e%256
			i, n := col/8, col%8
			b := &bs[i]
			acc := kernels.MMABF16Dot16(&bs[0].A[m], &b.B[n], math.Float32frombits(b.C[m][n]))
			return math.Float32bits(acc), "A " + regimes[0] + ", B, C " + regimes[i%nReg],
				fmt.Sprintf("(%d,%d): a %04X b %04X c %08X", m, col, bs[0].A[m], b.B[n], b.C[m][n])
		}}
	case strings.HasSuffix(path, "4"): // chains: blocks 4u..4u+3 on one accumulator from C of block 4u
		return layout{"4 k-steps on one accumulator", 4, 512, func(bs []block, e int) (uint32, string, string) {
			m, n := e/8, e%8
			acc := math.Float32frombits(bs[0].C[m][n])
			for s := range bs {
				acc = kernels.MMABF16Dot16(&bs[s].A[m], &bs[s].B[n], acc)
			}
			return math.Float32bits(acc), "", fmt.Sprintf("(%d,%d): first step %s", m, n, ab(&bs[0], m, n))
		}}
	}
	return layout{"one k-step", 1, 512, func(bs []block, e int) (uint32, string, string) {
		m, n := e/8, e%8
		b := &bs[0]
		acc := kernels.MMABF16Dot16(&b.A[m], &b.B[n], math.Float32frombits(b.C[m][n]))
		return math.Float32bits(acc), "", fmt.Sprintf("(%d,%d): %s", m, n, ab(b, m, n))
	}}
}

// check compares every output of a bulk file with kernels.MMABF16Dot16 on all cores, and prints the count per
// regime with the first differing case of each.
func check(seed uint64, path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	d := u32s(data)
	l := layoutOf(path)
	U := len(d) / l.outs
	type tally struct {
		n, bad int
		first  string
	}
	total := map[string]*tally{}
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	nw := runtime.GOMAXPROCS(0)
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			bs := make([]block, l.blocks)
			local := map[string]*tally{}
			for u := w; u < U; u += nw {
				for i := range bs {
					genBlock(seed, uint64(u*l.blocks+i), &bs[i])
				}
				for e := 0; e < l.outs; e++ {
					got, regime, in := l.want(bs, e)
					if regime == "" { // the regimes of the unit's blocks
						names := make([]string, l.blocks)
						for i := range names {
							names[i] = regimes[(u*l.blocks+i)%nReg]
						}
						regime = strings.Join(names, "+")
					}
					t := local[regime]
					if t == nil {
						t = &tally{}
						local[regime] = t
					}
					t.n++
					if gpu := d[u*l.outs+e]; got != gpu {
						if t.bad == 0 {
							t.first = fmt.Sprintf("unit %d %s: gpu %08X, emulation %08X", u, in, gpu, got)
						}
						t.bad++
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for r, t := range local {
				g := total[r]
				if g == nil {
					g = &tally{}
					total[r] = g
					order = append(order, r)
				}
				g.n += t.n
				if g.bad == 0 {
					g.first = t.first
				}
				g.bad += t.bad
			}
		}(w)
	}
	wg.Wait()
	all, allBad := 0, 0
	sort.Strings(order)
	for _, r := range order {
		t := total[r]
		all += t.n
		allBad += t.bad
		fmt.Printf("%s: %-40s %11d dot products, %d differ %s\n", path, r, t.n, t.bad, t.first)
	}
	fmt.Printf("%s: %s: %d dot products, %d differ from kernels.MMABF16Dot16\n", path, l.what, all, allBad)
	return allBad == 0
}
