// Command mmacheck is the host side of mma_probe.cu: it writes the crafted k-steps, checks that its input
// generator is mma_probe's bit for bit, fits the summation model (kernels.MMASum) to the tensor core's outputs,
// and checks kernels.MMABF16Dot16 against every output of a bulk run.
//
//	mmacheck crafted OUT            the crafted cases as blocks for `mma_probe file`
//	mmacheck golden OUT.bin         the crafted cases with the GPU's answers (mma, then wgmma), as Go source
//	mmacheck parity SEED dump.bin   the dumped inputs against this generator
//	mmacheck fit dump.bin           mismatches of a grid of candidate models on the dumped outputs
//	mmacheck check SEED D.mma [D.wg]  every output of a bulk run against kernels.MMABF16Dot16
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"bitalign/kernels"
)

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "mmacheck: "+f+"\n", a...)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: mmacheck crafted|golden|parity|fit|check ...")
	}
	switch os.Args[1] {
	case "crafted":
		writeBlocks(os.Args[2], craftedBlocks(craftedCases()))
	case "golden":
		golden(os.Args[2])
	case "parity":
		seed, _ := strconv.ParseUint(os.Args[2], 0, 64)
		parity(seed, os.Args[3])
	case "fit":
		fit(os.Args[2])
	case "check":
		seed, _ := strconv.ParseUint(os.Args[2], 0, 64)
		for _, f := range os.Args[3:] {
			if strings.HasSuffix(f, "256") {
				if !check256(seed, f) {
					defer os.Exit(1)
				}
				continue
			}
			steps := 1
			if strings.HasSuffix(f, "4") {
				steps = 4
			}
			if !check(seed, f, steps) {
				defer os.Exit(1)
			}
		}
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func writeBlocks(path string, bs []block) {
	buf := make([]byte, 0, len(bs)*4352)
	for i := range bs {
		for m := 0; m < 64; m++ {
			for j := 0; j < 16; j++ {
				buf = binary.LittleEndian.AppendUint16(buf, bs[i].A[m][j])
			}
		}
		for n := 0; n < 8; n++ {
			for j := 0; j < 16; j++ {
				buf = binary.LittleEndian.AppendUint16(buf, bs[i].B[n][j])
			}
		}
		for m := 0; m < 64; m++ {
			for n := 0; n < 8; n++ {
				buf = binary.LittleEndian.AppendUint32(buf, bs[i].C[m][n])
			}
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		fail("%v", err)
	}
}

func u32s(b []byte) []uint32 {
	r := make([]uint32, len(b)/4)
	for i := range r {
		r[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return r
}

// emulate is output (m, n) of block b by s.
func emulate(s kernels.MMASum, b *block, m, n int) uint32 {
	return math.Float32bits(s.Dot16(&b.A[m], &b.B[n], math.Float32frombits(b.C[m][n])))
}

func golden(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	cs := craftedCases()
	nb := (len(cs) + 7) / 8
	if len(data) != nb*2048*3 {
		fail("%s: %d bytes, want %d", path, len(data), nb*2048*3)
	}
	d := u32s(data)
	fmt.Printf("# The crafted k-steps of kernels/cuda/experiments/mmacheck (crafted.go) and the H200's answers, measured by\n")
	fmt.Printf("# mma_probe file (%s). Written by `mmacheck golden`; TestMMACrafted checks kernels.MMABF16Dot16 on every line.\n", os.Getenv("MMA_SOURCE"))
	fmt.Printf("# name | products j:a*b (bf16 bits, the rest +0*+0) | c (float32 bits) | mma.sync m16n8k16 | wgmma m64n8k16\n")
	for i, k := range cs {
		e := (i/8)*512 + (i%8)*8 + i%8
		var ps []string
		for j := 0; j < 16; j++ {
			if k.A[j] != 0 || k.B[j] != 0 {
				ps = append(ps, fmt.Sprintf("%d:%04X*%04X", j, k.A[j], k.B[j]))
			}
		}
		fmt.Printf("%s | %s | %08X | %08X | %08X\n", k.Name, strings.Join(ps, " "), k.C, d[e], d[nb*512+e])
	}
}

// dump is mma_probe's dump.bin: K blocks' inputs and their mma, wgmma and mma-again outputs.
type dump struct {
	bs         []block
	dm, dw, dx []uint32
}

func readDump(path string) dump {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	K := len(data) / (2048 + 256 + 2048*4)
	var d dump
	d.bs = make([]block, K)
	o := 0
	for t := 0; t < K; t++ {
		for m := 0; m < 64; m++ {
			for j := 0; j < 16; j++ {
				d.bs[t].A[m][j] = binary.LittleEndian.Uint16(data[o:])
				o += 2
			}
		}
	}
	for t := 0; t < K; t++ {
		for n := 0; n < 8; n++ {
			for j := 0; j < 16; j++ {
				d.bs[t].B[n][j] = binary.LittleEndian.Uint16(data[o:])
				o += 2
			}
		}
	}
	for t := 0; t < K; t++ {
		for m := 0; m < 64; m++ {
			for n := 0; n < 8; n++ {
				d.bs[t].C[m][n] = binary.LittleEndian.Uint32(data[o:])
				o += 4
			}
		}
	}
	d.dm = u32s(data[o : o+K*2048])
	d.dw = u32s(data[o+K*2048 : o+2*K*2048])
	d.dx = u32s(data[o+2*K*2048 : o+3*K*2048])
	return d
}

func parity(seed uint64, path string) {
	d := readDump(path)
	bad := 0
	var g block
	for t := range d.bs {
		genBlock(seed, uint64(t), &g)
		if g != d.bs[t] {
			bad++
			if bad == 1 {
				fmt.Printf("block %d differs\n", t)
			}
		}
	}
	fmt.Printf("parity: %d of %d blocks differ\n", bad, len(d.bs))
}

func fit(path string) {
	d := readDump(path)
	same := 0
	for i := range d.dm {
		if d.dm[i] == d.dw[i] {
			same++
		}
	}
	fmt.Printf("wgmma = mma on %d of %d\n", same, len(d.dm))
	type cand struct {
		s   kernels.MMASum
		bad [nReg]int
		tot int
	}
	var cs []cand
	for _, g := range []int{16, 8, 4} {
		for f := 22; f <= 30; f++ {
			for _, nom := range []bool{false, true} {
				for _, tf := range []bool{false, true} {
					for _, r := range []kernels.MMARound{kernels.RoundZero, kernels.RoundNearest, kernels.RoundDown} {
						s := kernels.MMASum{Group: g, Frac: f, Nominal: nom, TruncFloor: tf, Round: r}
						cs = append(cs, cand{s: s})
					}
				}
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for ci := range cs {
		wg.Add(1)
		sem <- struct{}{}
		go func(c *cand) {
			defer func() { <-sem; wg.Done() }()
			for t := range d.bs {
				r := t % nReg
				if t >= 128 && r != 2 && r != 3 { // a sample: regimes 2, 3 in full
					continue
				}
				for e := 0; e < 512; e++ {
					if emulate(c.s, &d.bs[t], e/8, e%8) != d.dm[t*512+e] {
						c.bad[r]++
						c.tot++
					}
				}
			}
		}(&cs[ci])
	}
	wg.Wait()
	sort.Slice(cs, func(i, j int) bool { return cs[i].tot < cs[j].tot })
	for _, c := range cs[:12] {
		fmt.Printf("group %2d frac %d nominal %-5v floor %-5v round %d: %6d bad %v\n", c.s.Group, c.s.Frac, c.s.Nominal, c.s.TruncFloor, c.s.Round, c.tot, c.bad)
	}
	// first mismatches of the best
	best := cs[0].s
	shown := [nReg]int{}
	for t := range d.bs {
		r := t % nReg
		for e := 0; e < 512 && shown[r] < 3; e++ {
			if got := emulate(best, &d.bs[t], e/8, e%8); got != d.dm[t*512+e] {
				shown[r]++
				b := &d.bs[t]
				fmt.Printf("%s block %d (%d,%d): a %04X b %04X c %08X gpu %08X emu %08X\n", regimes[r], t, e/8, e%8, b.A[e/8], b.B[e%8], b.C[e/8][e%8], d.dm[t*512+e], got)
			}
		}
	}
}

// check compares every output in path with the emulation: steps = 1, block t's 512 outputs (T blocks); steps =
// 4, chain u's (blocks 4u..4u+3 in turn on one accumulator, starting from C of block 4u).
func check(seed uint64, path string, steps int) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	d := u32s(data)
	U := len(d) / 512
	nw := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var bad, tot [nReg]int
	first := [nReg]string{}
	var wg sync.WaitGroup
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			bs := make([]block, steps)
			var lb, lt [nReg]int
			lf := [nReg]string{}
			for u := w; u < U; u += nw {
				for s := range bs {
					genBlock(seed, uint64(u*steps+s), &bs[s])
				}
				r := (u * steps) % nReg
				for e := 0; e < 512; e++ {
					m, n := e/8, e%8
					acc := math.Float32frombits(bs[0].C[m][n])
					for s := range bs {
						acc = kernels.MMABF16Dot16(&bs[s].A[m], &bs[s].B[n], acc)
					}
					lt[r]++
					if got := math.Float32bits(acc); got != d[u*512+e] {
						if lb[r] == 0 {
							b := &bs[0]
							lf[r] = fmt.Sprintf("chain %d (%d,%d): a %04X b %04X c %08X gpu %08X emulation %08X", u, m, n, b.A[m], b.B[n], b.C[m][n], d[u*512+e], got)
						}
						lb[r]++
					}
				}
			}
			mu.Lock()
			for r := range lb {
				bad[r] += lb[r]
				tot[r] += lt[r]
				if first[r] == "" {
					first[r] = lf[r]
				}
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	all, allBad := 0, 0
	for r := range bad {
		if tot[r] == 0 {
			continue
		}
		all += tot[r]
		allBad += bad[r]
		name := strings.Join(regimes[r:r+steps], "+")
		fmt.Printf("%s: %-12s %11d dot products of %d k-steps, %d differ %s\n", path, name, tot[r], steps, bad[r], first[r])
	}
	fmt.Printf("%s: %d dot products of %d k-steps, %d differ from kernels.MMABF16Dot16\n", path, all, steps, allBad)
	return allBad == 0
}

// check256 compares the outputs of wgmma m64n256k16 (mma_probe's wg256_kernel): unit u is (64, 256), output
// (m, 8i+n) is A row m of block 32u times B column n of block 32u+i plus C[m][n] of block 32u+i.
func check256(seed uint64, path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	d := u32s(data)
	U := len(d) / (64 * 256)
	nw := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var bad, tot [nReg]int
	first := [nReg]string{}
	var wg sync.WaitGroup
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			bs := make([]block, 32)
			var lb, lt [nReg]int
			lf := [nReg]string{}
			for u := w; u < U; u += nw {
				for i := range bs {
					genBlock(seed, uint64(u*32+i), &bs[i])
				}
				for m := 0; m < 64; m++ {
					for col := 0; col < 256; col++ {
						i, n := col/8, col%8
						r := (u*32 + i) % nReg
						want := d[u*64*256+m*256+col]
						lt[r]++
						got := math.Float32bits(kernels.MMABF16Dot16(&bs[0].A[m], &bs[i].B[n], math.Float32frombits(bs[i].C[m][n])))
						if got != want {
							if lb[r] == 0 {
								lf[r] = fmt.Sprintf("unit %d (%d,%d): a %04X b %04X c %08X gpu %08X emulation %08X", u, m, col, bs[0].A[m], bs[i].B[n], bs[i].C[m][n], want, got)
							}
							lb[r]++
						}
					}
				}
			}
			mu.Lock()
			for r := range lb {
				bad[r] += lb[r]
				tot[r] += lt[r]
				if first[r] == "" {
					first[r] = lf[r]
				}
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	all, allBad := 0, 0
	for r := range bad {
		all += tot[r]
		allBad += bad[r]
		fmt.Printf("%s: A narrow, B and C %-12s %11d dot products, %d differ %s\n", path, regimes[r], tot[r], bad[r], first[r])
	}
	fmt.Printf("%s: %d dot products (wgmma m64n256k16), %d differ from kernels.MMABF16Dot16\n", path, all, allBad)
	return allBad == 0
}
